// The phone side of pairing: claim the link's secret, show the code, wait for the computer,
// finish. The secret lives only in the link's fragment and leaves the address bar at once.
"use strict";
const POLL_MS = 2000;

function failed(answer) {
  const message = answer.data && answer.data.message ? answer.data.message : `The server answered ${answer.status}.`;
  const code = answer.data && answer.data.code ? ` (${answer.data.code})` : "";
  $("failure").textContent = message + code;
  show("failed");
}

function platform() {
  const agent = navigator.userAgent;
  if (/iPhone|iPad|iPod/.test(agent)) return "ios";
  if (/Android/.test(agent)) return "android";
  return "other";
}

async function claim(secret) {
  const answer = await call("POST", "/pwa/_auth/pairings/claim", { secret, platform: platform() });
  if (answer.status !== 200) return failed(answer);
  $("code").textContent = answer.data.code;
  $("account").textContent = answer.data.account.name;
  show("code-step");
  await waitForComputer();
}

async function waitForComputer() {
  for (;;) {
    const answer = await call("POST", "/pwa/_auth/pairings/complete");
    if (answer.status === 200) return show("paired");
    if (answer.status !== 202) return failed(answer);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

async function start() {
  if ("serviceWorker" in navigator) {
    navigator.serviceWorker.register("/pwa/sw.js", { scope: "/pwa/", updateViaCache: "none" }).catch(() => {});
  }
  const link = location.hash.match(/^#pair=([A-Za-z0-9_-]{43})$/);
  if (link) {
    history.replaceState(null, "", location.pathname);
    return claim(link[1]);
  }
  const renewal = await call("POST", "/pwa/_auth/session/renew");
  show(renewal.status === 200 ? "paired" : "welcome");
}

$("unpair").addEventListener("click", async () => {
  await call("DELETE", "/pwa/_auth/session");
  show("welcome");
});

start().catch((error) => failed({ status: 0, data: { message: String(error) } }));
