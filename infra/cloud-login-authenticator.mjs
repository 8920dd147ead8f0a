#!/usr/bin/env node
// A minimal Cloud Login authenticator for trying the flow from a terminal: it holds a P-256 key
// (WebCrypto, as the app does), enrolls with a pairing link and approves sign-ins.
//
//   node infra/cloud-login-authenticator.mjs enroll '<pairing link or the start answer JSON>'
//   node infra/cloud-login-authenticator.mjs pending
//   node infra/cloud-login-authenticator.mjs approve <comparison code>   # or: deny <code>
//
// The key and the device id are kept in $K2B_AUTHENTICATOR_FILE (default
// ./cloud-login-authenticator.json). Node 20 or later; no packages needed.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { randomUUID, webcrypto } from "node:crypto";

const PROTOCOL = "cloud-app-approval-v1";
const API = "/api/auth/app-approval/v1";
const FILE = process.env.K2B_AUTHENTICATOR_FILE ?? "cloud-login-authenticator.json";
const subtle = webcrypto.subtle;
const b64url = (bytes) => Buffer.from(bytes).toString("base64url");

const sign = async (privateJwk, message) => {
  const key = await subtle.importKey("jwk", privateJwk, { name: "ECDSA", namedCurve: "P-256" }, false, ["sign"]);
  return b64url(await subtle.sign({ name: "ECDSA", hash: "SHA-256" }, key, new TextEncoder().encode(message)));
};

const post = async (issuer, path, body) => {
  const response = await fetch(issuer + API + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
};

const load = () => {
  if (!existsSync(FILE)) throw new Error(`no authenticator in ${FILE}: enroll first`);
  return JSON.parse(readFileSync(FILE, "utf8"));
};

const parsePairing = (input) => {
  const text = input.trim();
  const json = text.includes("#pairing=") ? decodeURIComponent(text.split("#pairing=")[1]) : text;
  const payload = JSON.parse(json);
  if (payload.protocol !== PROTOCOL) throw new Error("not a Cloud Login pairing");
  return payload;
};

const enroll = async (input, name = "Terminal authenticator") => {
  const pairing = parsePairing(input);
  const pair = await subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"]);
  const privateJwk = await subtle.exportKey("jwk", pair.privateKey);
  const { kty, crv, x, y } = await subtle.exportKey("jwk", pair.publicKey);
  const publicKey = { kty, crv, x, y };
  const message = JSON.stringify([PROTOCOL, "pair", pairing.issuer, pairing.pairingId, pairing.secret, kty, crv, x, y, name]);
  const claimed = await post(pairing.issuer, "/pairings/claim", {
    pairingId: pairing.pairingId,
    secret: pairing.secret,
    publicKey,
    name,
    signature: await sign(privateJwk, message),
  });
  writeFileSync(FILE, JSON.stringify({ issuer: pairing.issuer, deviceId: claimed.deviceId, privateJwk }, null, 2), { mode: 0o600 });
  console.log(`claimed: type ${claimed.comparison} in the browser to confirm (device ${claimed.deviceId})`);
  for (;;) {
    const result = await post(pairing.issuer, "/pairings/result", { pairingId: pairing.pairingId, secret: pairing.secret, publicKey });
    if (result.state !== "claimed") {
      console.log(`pairing ${result.state}`);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
};

const command = async (device, command) => {
  const now = Math.floor(Date.now() / 1000);
  const proof = { issuer: device.issuer, deviceId: device.deviceId, jti: randomUUID(), issuedAt: now, expiresAt: now + 60, command };
  const extra = command.operation === "decide" ? [command.requestId, command.challenge, command.comparison, command.decision] : [];
  const message = JSON.stringify([PROTOCOL, "device", proof.issuer, proof.deviceId, proof.jti, proof.issuedAt, proof.expiresAt, command.operation, ...extra]);
  return post(device.issuer, "/device", { proof, signature: await sign(device.privateJwk, message) });
};

const [verb, arg] = process.argv.slice(2);
try {
  if (verb === "enroll" && arg) await enroll(arg, process.argv[4]);
  else if (verb === "pending") {
    const { requests } = await command(load(), { operation: "pending" });
    for (const r of requests) console.log(`${r.comparison}  ${r.requestId}  expires ${r.expiresAt}`);
    if (requests.length === 0) console.log("no sign-in waiting");
  } else if ((verb === "approve" || verb === "deny") && arg) {
    const device = load();
    const { requests } = await command(device, { operation: "pending" });
    const request = requests.find((r) => r.comparison === arg);
    if (!request) throw new Error(`no waiting sign-in shows ${arg}`);
    const decided = await command(device, {
      operation: "decide",
      requestId: request.requestId,
      challenge: request.challenge,
      comparison: request.comparison,
      decision: verb,
    });
    console.log(decided.state);
  } else {
    console.error("usage: enroll '<link>' [name] | pending | approve <code> | deny <code>");
    process.exit(2);
  }
} catch (error) {
  console.error(error.message);
  process.exit(1);
}
