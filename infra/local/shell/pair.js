// The web side of pairing: start a pairing, show its link as a QR code, wait for the phone to
// claim it, confirm the code the phone shows, wait for the phone to finish.
"use strict";
const API = "/api/auth/pwa/v1/pairings";
const POLL_MS = 1000;
let pairing = null;

function describe(answer) {
  if (answer.data && answer.data.code === "REAUTHENTICATE") {
    return "Sign in again first (the start page has a shortcut for the local admin).";
  }
  const message = answer.data && answer.data.message ? answer.data.message : `The server answered ${answer.status}.`;
  return answer.data && answer.data.code ? `${message} (${answer.data.code})` : message;
}

function failed(answer) {
  pairing = null;
  $("failure").textContent = describe(answer);
  show("failed");
}

async function start() {
  const answer = await call("POST", API, {});
  if (answer.status !== 201) return failed(answer);
  pairing = answer.data;
  const link = `${location.origin}/pwa/#pair=${pairing.secret}`;
  $("link").href = link;
  $("link").textContent = link;
  const qr = await fetch("/shell/qr", { method: "POST", headers: { "Content-Type": "text/plain" }, body: link });
  if (qr.ok) $("qr").innerHTML = await qr.text();
  show("link-step");
  watch(pairing.id);
}

async function watch(id) {
  let asked = false;
  while (pairing && pairing.id === id) {
    const answer = await call("GET", `${API}/${id}`);
    if (answer.status !== 200) return failed(answer);
    const state = answer.data.state;
    if (state === "claimed" && !asked) {
      asked = true;
      $("device").textContent = answer.data.device.name;
      show("code-step");
      $("code").focus();
    } else if (state === "completed") {
      $("paired-device").textContent = answer.data.device.name;
      pairing = null;
      return show("paired");
    } else if (state === "cancelled") {
      return failed({ status: 410, data: { message: "The pairing was cancelled.", code: "EXPIRED" } });
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

$("start").addEventListener("click", () => start().catch((error) => failed({ status: 0, data: { message: String(error) } })));

$("confirm").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!pairing) return;
  const answer = await call("POST", `${API}/${pairing.id}/confirm`, { code: $("code").value.trim() });
  if (answer.status === 204) return show("finishing");
  if (answer.status === 409 && answer.data && answer.data.code === "WRONG_CODE") {
    $("code-error").textContent = `${describe(answer)} Attempts left: ${answer.data.attemptsLeft}.`;
    $("code").select();
    return;
  }
  failed(answer);
});

$("cancel").addEventListener("click", async () => {
  if (pairing) await call("POST", `${API}/${pairing.id}/cancel`, {});
  pairing = null;
  show("ready");
});
