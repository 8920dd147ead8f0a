// The dashboard: reads the widget stream line by line and draws each widget the moment its
// line arrives (fast widgets do not wait for slow ones). Provider content is set as text only.
"use strict";
const $ = (id) => document.getElementById(id);
const STATES = {
  empty: "Nothing to show right now.",
  forbidden: "You may not see this widget.",
  timeout: "This widget took too long.",
  error: "This widget could not be loaded.",
};

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function placeholder(key) {
  const card = element("article", "card");
  card.dataset.key = key;
  card.dataset.state = "waiting";
  card.append(element("h3", "", key), element("p", "meta", "Loading…"));
  $("widgets").append(card);
}

function block(data) {
  if (data.kind === "stat") {
    const node = element("div");
    node.append(element("div", "stat", data.value), element("div", "meta", data.label || ""));
    return node;
  }
  if (data.kind === "list") {
    const list = element("ul");
    for (const item of data.items || []) list.append(element("li", "", item.meta ? `${item.label} · ${item.meta}` : item.label));
    return list;
  }
  if (data.kind === "text") return element("p", "", data.text || "");
  return element("p", "meta", `(a ${data.kind} block)`);
}

function settle(line) {
  let card = document.querySelector(`[data-key="${CSS.escape(line.key)}"]`);
  if (!card) {
    placeholder(line.key);
    card = document.querySelector(`[data-key="${CSS.escape(line.key)}"]`);
  }
  card.replaceChildren();
  card.dataset.state = line.status;
  card.dataset.shownAt = String(performance.now());
  if (line.status === "ok" && line.widget) {
    card.append(element("h3", "", line.widget.title || line.key));
    if (line.widget.meta) card.append(element("p", "meta", line.widget.meta));
    for (const data of line.widget.blocks || []) card.append(block(data));
  } else {
    card.append(element("h3", "", line.key), element("p", "meta", STATES[line.status] || line.status));
  }
}

function handle(line) {
  if (line.type === "start") {
    for (const key of line.widgets) placeholder(key);
    $("status").textContent = line.widgets.length ? "" : "No app offers a widget.";
  } else if (line.type === "widget") {
    settle(line);
  } else if (line.type === "done") {
    document.body.dataset.done = line.status;
    $("status").textContent = line.status === "complete" ? "" : "Some widgets could not be loaded.";
  }
}

async function load() {
  const response = await fetch("/api/widgets/v1", { headers: { accept: "application/x-ndjson" }, credentials: "same-origin" });
  if (!response.ok) {
    let message = `The widgets answered ${response.status}.`;
    try {
      const body = await response.json();
      if (body.message) message = body.code ? `${body.message} (${body.code})` : body.message;
    } catch {}
    if (response.status === 401 || response.status === 403) message += " Sign in on the start page first.";
    $("status").textContent = message;
    $("status").className = "error";
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buffer += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const text = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      if (text) handle(JSON.parse(text));
    }
    if (done) break;
  }
  if (!document.body.dataset.done) {
    $("status").textContent = "The stream ended early.";
    $("status").className = "error";
  }
}

load().catch((error) => {
  $("status").textContent = String(error);
  $("status").className = "error";
});
