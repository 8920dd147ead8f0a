// The installed app's service worker. It caches nothing and never touches CacheStorage: the
// offline page lives in this script, which only the network can change. It answers only
// navigations inside the app's scope; everything else goes to the network untouched.
const SCOPE = "/pwa/";
const AUTH = "/pwa/_auth";

self.addEventListener("install", () => {
  self.skipWaiting();
});

self.addEventListener("activate", (event) => {
  event.waitUntil(self.clients.claim());
});

const offlinePage = () =>
  new Response(OFFLINE_HTML, {
    status: 200,
    headers: { "Content-Type": "text/html; charset=utf-8" },
  });

// Core's own 404 means the gateway had nothing to route to (the app is down or not deployed);
// under /pwa/_auth it is a real answer about the phone's identity.
const isGatewayMiss = (response, pathname) =>
  response.status === 404 &&
  response.headers.get("X-Gateway-App") === "core" &&
  pathname !== AUTH &&
  !pathname.startsWith(AUTH + "/");

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.mode !== "navigate") return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin || !url.pathname.startsWith(SCOPE)) return;
  event.respondWith(
    (async () => {
      let response;
      try {
        response = await fetch(request);
      } catch {
        return offlinePage();
      }
      if (response.status === 502 || response.status === 503 || response.status === 504) return offlinePage();
      if (isGatewayMiss(response, url.pathname)) return offlinePage();
      return response;
    })(),
  );
});
