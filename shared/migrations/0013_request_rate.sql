-- Requests counted per client and second for `security.rate_limit_per_second`, shared by every
-- execution environment (each counting alone would allow the limit once per environment). One
-- row per client key: the current second and how many requests it has seen. Unlogged: a crash
-- forgets at most the counts of the current second.
CREATE UNLOGGED TABLE IF NOT EXISTS auth.request_rate (
    client_key text PRIMARY KEY CHECK (char_length(client_key) BETWEEN 1 AND 200),
    second     bigint NOT NULL,
    requests   integer NOT NULL CHECK (requests > 0)
);
