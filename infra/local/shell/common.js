// What the shell's pages share: element lookup, one visible section, JSON calls.
"use strict";
const $ = (id) => document.getElementById(id);

function show(id) {
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== id;
}

// A same-origin request with an optional JSON body; answers `{status, data}` (data: the JSON
// body, or null).
async function call(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  return { status: response.status, data };
}
