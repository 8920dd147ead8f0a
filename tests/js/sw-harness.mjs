// Runs the service worker in a real JavaScript engine (Node's vm) with a minimal worker and
// fetch environment, then reports what it did for each scenario as JSON on stdout.
// Usage: node sw-harness.mjs <path to sw.js>
import { readFileSync } from "node:fs";
import vm from "node:vm";

const source = readFileSync(process.argv[2], "utf8");
const ORIGIN = "https://cloud.example.test";

const makeWorker = () => {
  const listeners = {};
  const calls = { skipWaiting: 0, claim: 0, cacheStorage: 0 };
  const state = { fetch: async () => new Response("page", { status: 200 }) };
  const self = {
    location: { origin: ORIGIN, href: `${ORIGIN}/pwa/sw.js` },
    addEventListener: (type, listener) => {
      (listeners[type] ??= []).push(listener);
    },
    skipWaiting: () => {
      calls.skipWaiting += 1;
      return Promise.resolve();
    },
    clients: {
      claim: () => {
        calls.claim += 1;
        return Promise.resolve();
      },
    },
  };
  const context = {
    self,
    Response,
    Headers,
    URL,
    console,
    fetch: (request) => state.fetch(request),
  };
  // Any use of CacheStorage is a failure.
  for (const target of [context, self]) {
    Object.defineProperty(target, "caches", {
      get() {
        calls.cacheStorage += 1;
        throw new Error("CacheStorage must not be used");
      },
    });
  }
  vm.createContext(context);
  vm.runInContext(source, context, { filename: "sw.js" });
  const dispatch = async (type, event) => {
    for (const listener of listeners[type] ?? []) listener(event);
  };
  return { listeners, calls, state, dispatch };
};

const lifecycle = async () => {
  const worker = makeWorker();
  const waits = [];
  await worker.dispatch("install", { waitUntil: (p) => waits.push(p) });
  await worker.dispatch("activate", { waitUntil: (p) => waits.push(p) });
  await Promise.all(waits);
  return { ...worker.calls };
};

const navigate = async (name, { url, mode = "navigate", upstream }) => {
  const worker = makeWorker();
  worker.state.fetch = upstream;
  let responded = null;
  const event = {
    request: { url, mode, method: "GET" },
    respondWith: (promise) => {
      responded = promise;
    },
    waitUntil: () => {},
  };
  await worker.dispatch("fetch", event);
  if (responded === null) return { name, intercepted: false, cacheStorage: worker.calls.cacheStorage };
  const response = await responded;
  const body = await response.text();
  return {
    name,
    intercepted: true,
    status: response.status,
    contentType: response.headers.get("content-type"),
    offline: body.includes("<!doctype html>") && body.includes("Try again"),
    body: body.length > 200 ? body.slice(0, 200) : body,
    cacheStorage: worker.calls.cacheStorage,
  };
};

const respond = (status, headers = {}) => async () => new Response(`upstream ${status}`, { status, headers });
const failing = async () => {
  throw new TypeError("Failed to fetch");
};

const scenarios = [
  ["page", { url: `${ORIGIN}/pwa/spaces`, upstream: respond(200) }],
  ["network error", { url: `${ORIGIN}/pwa/spaces`, upstream: failing }],
  ["502", { url: `${ORIGIN}/pwa/spaces`, upstream: respond(502) }],
  ["503", { url: `${ORIGIN}/pwa/spaces`, upstream: respond(503) }],
  ["504", { url: `${ORIGIN}/pwa/spaces`, upstream: respond(504) }],
  ["core 404", { url: `${ORIGIN}/pwa/spaces`, upstream: respond(404, { "X-Gateway-App": "core" }) }],
  ["core 404 under _auth", { url: `${ORIGIN}/pwa/_auth/session/launch`, upstream: respond(404, { "X-Gateway-App": "core" }) }],
  ["core 404 at _auth", { url: `${ORIGIN}/pwa/_auth`, upstream: respond(404, { "X-Gateway-App": "core" }) }],
  ["inventory 404", { url: `${ORIGIN}/pwa/inventory`, upstream: respond(404, { "X-Gateway-App": "inventory" }) }],
  ["500", { url: `${ORIGIN}/pwa/spaces`, upstream: respond(500) }],
  ["cors api", { url: `${ORIGIN}/api/spaces/v1/items`, mode: "cors", upstream: failing }],
  ["cors in scope", { url: `${ORIGIN}/pwa/spaces`, mode: "cors", upstream: failing }],
  ["outside scope", { url: `${ORIGIN}/me/app`, upstream: failing }],
  ["other origin", { url: "https://other.example.test/pwa/", upstream: failing }],
];

const results = { lifecycle: await lifecycle(), fetch: [] };
for (const [name, options] of scenarios) results.fetch.push(await navigate(name, options));
process.stdout.write(JSON.stringify(results));
