-- Help corpora that apps publish: one corpus per (app, content hash), alive while the app
-- renews it (maintenance deletes corpora not seen for 6 minutes), and its documents per locale
-- with a weighted full-text document in the locale's text search configuration.
CREATE SCHEMA IF NOT EXISTS help;

CREATE TABLE IF NOT EXISTS help.corpora (
    app_id        text NOT NULL CHECK (app_id ~ '^[a-z][a-z0-9-]{0,79}$'),
    manifest_hash text NOT NULL CHECK (manifest_hash ~ '^[0-9a-f]{64}$'),
    base_locale   text NOT NULL CHECK (char_length(base_locale) BETWEEN 1 AND 35),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, manifest_hash)
);

CREATE INDEX IF NOT EXISTS help_expiry_idx ON help.corpora (last_seen_at);

CREATE TABLE IF NOT EXISTS help.documents (
    app_id          text NOT NULL,
    manifest_hash   text NOT NULL,
    locale          text NOT NULL CHECK (char_length(locale) BETWEEN 1 AND 35),
    document_id     text NOT NULL CHECK (document_id ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),
    title           text NOT NULL CHECK (char_length(btrim(title)) >= 1),
    description     text CHECK (char_length(btrim(description)) >= 1),
    icon            text CHECK (char_length(btrim(icon)) >= 1),
    sort_order      integer NOT NULL,
    -- Each document's Markdown is at most 128 KiB.
    markdown        text NOT NULL CHECK (octet_length(markdown) BETWEEN 1 AND 131072),
    search_text     text NOT NULL,
    search_config   text NOT NULL CHECK (search_config IN ('english', 'german', 'simple')),
    search_document tsvector NOT NULL,
    PRIMARY KEY (app_id, manifest_hash, locale, document_id),
    FOREIGN KEY (app_id, manifest_hash) REFERENCES help.corpora (app_id, manifest_hash)
        ON DELETE CASCADE
);

CREATE INDEX IF NOT EXISTS help_search_idx ON help.documents USING gin (search_document);

-- Exact matches of a search (a document's id or title) without reading every row.
CREATE INDEX IF NOT EXISTS help_title_idx ON help.documents (lower(title));
CREATE INDEX IF NOT EXISTS help_document_idx ON help.documents (document_id);
