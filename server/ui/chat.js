// chat.js - the chat page: a conversation kept in localStorage, replies streamed from the
// server's own /v1/chat/completions. Text from the user or the model is only ever inserted as
// text nodes (textContent), never parsed as HTML.
"use strict";

const KEY = "dsv41-chat";
const $ = (id) => document.getElementById(id);
const fields = { temperature: "temperature", top_p: "top-p", max_tokens: "max-tokens", effort: "effort", special: "special", api_key: "api-key", system: "system" };
let state = load();
let controller = null; // the reply being streamed

function load() {
    try {
        const s = JSON.parse(localStorage.getItem(KEY));
        if (s && Array.isArray(s.messages)) return s;
    } catch (e) { /* a damaged store starts over */ }
    return { messages: [], settings: {} };
}

function save() { localStorage.setItem(KEY, JSON.stringify(state)); }

function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
}

// Text with ``` fences: prose as pre-wrapped text, fenced blocks as <pre><code>.
function renderText(parent, text) {
    const parts = text.split("```");
    parts.forEach((part, i) => {
        if (i % 2 === 0) {
            if (part) parent.append(el("div", "text", part));
            return;
        }
        const nl = part.indexOf("\n"), lang = nl >= 0 ? part.slice(0, nl).trim() : "";
        const code = el("code", null, nl >= 0 ? part.slice(nl + 1) : part);
        if (/^[\w+-]+$/.test(lang)) code.dataset.lang = lang;
        const pre = el("pre");
        pre.append(code);
        parent.append(pre);
    });
}

function renderMessage(m) {
    const box = el("div", "msg");
    box.dataset.role = m.role;
    if (m.reasoning) {
        const d = el("details");
        d.append(el("summary", null, "Reasoning"));
        d.append(el("div", "text", m.reasoning));
        box.append(d);
    }
    renderText(box, m.content || "");
    if (m.error) box.append(el("div", "error", m.error));
    if (m.stats) box.append(el("div", "stats", m.stats));
    return box;
}

function renderAll() {
    const list = $("messages");
    list.replaceChildren(...state.messages.map(renderMessage));
    list.scrollTop = list.scrollHeight;
}

function readSettings() {
    for (const [k, id] of Object.entries(fields)) state.settings[k] = $(id).value;
    save();
}

function writeSettings() {
    for (const [k, id] of Object.entries(fields)) if (state.settings[k] !== undefined) $(id).value = state.settings[k];
}

function headers() {
    const h = { "Content-Type": "application/json" };
    if (state.settings.api_key) h.Authorization = "Bearer " + state.settings.api_key;
    return h;
}

function request() {
    const s = state.settings, msgs = [];
    if (s.system) msgs.push({ role: "system", content: s.system });
    for (const m of state.messages.slice(0, -1)) if (m.content || m.role === "user") msgs.push({ role: m.role, content: m.content || "" });
    const body = { model: "dsv41", messages: msgs, stream: true, stream_options: { include_usage: true } };
    const num = (v) => (v === "" || v === undefined ? undefined : Number(v));
    if (num(s.temperature) !== undefined) body.temperature = num(s.temperature);
    if (num(s.top_p) !== undefined) body.top_p = num(s.top_p);
    if (num(s.max_tokens) !== undefined) body.max_tokens = num(s.max_tokens);
    if (s.effort) body.reasoning_effort = s.effort;
    if (s.special) body.skip_special_tokens = false; // the server's rule otherwise, as the CLI's without --special
    return body;
}

function setBusy(busy) {
    $("send").disabled = busy;
    $("stop").disabled = !busy;
}

// Server-sent events: "data: {...}" blocks separated by blank lines.
async function stream(response, reply, show) {
    const reader = response.body.getReader(), dec = new TextDecoder();
    let buf = "", tokens = 0, first = 0, usage = null;
    for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
            const event = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            if (!event.startsWith("data: ")) continue;
            const data = event.slice(6);
            if (data === "[DONE]") return { tokens, first, usage };
            const c = JSON.parse(data);
            if (c.error) throw new Error(c.error.message);
            if (c.usage) usage = c.usage;
            for (const ch of c.choices || []) {
                const d = ch.delta || {};
                if (d.content || d.reasoning_content) {
                    if (!first) first = performance.now();
                    tokens++;
                }
                if (d.reasoning_content) reply.reasoning = (reply.reasoning || "") + d.reasoning_content;
                if (d.content) reply.content += d.content;
                if (d.tool_calls) reply.content += d.tool_calls.map((t) => `\n[tool call ${t.function.name}(${t.function.arguments})]`).join("");
            }
            show();
        }
    }
    return { tokens, first, usage };
}

async function send() {
    const text = $("prompt").value;
    if (!text.trim() || controller) return;
    readSettings();
    $("prompt").value = "";
    state.messages.push({ role: "user", content: text });
    const reply = { role: "assistant", content: "" };
    state.messages.push(reply);
    renderAll();
    const list = $("messages"), box = list.lastElementChild;
    const show = () => {
        const fresh = renderMessage(reply);
        box.replaceChildren(...fresh.childNodes);
        list.scrollTop = list.scrollHeight;
    };
    controller = new AbortController();
    setBusy(true);
    const t0 = performance.now();
    try {
        const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(request()), signal: controller.signal });
        if (!r.ok) {
            let msg = r.status + " " + r.statusText;
            try { msg = (await r.json()).error.message; } catch (e) { /* not JSON */ }
            throw new Error(msg);
        }
        const { tokens, first, usage } = await stream(r, reply, show);
        const n = usage ? usage.completion_tokens : tokens, secs = (performance.now() - (first || t0)) / 1000;
        reply.stats = `${n} tokens, ${secs > 0 ? (n / secs).toFixed(1) : "-"} tokens/s`;
    } catch (e) {
        if (e.name === "AbortError") reply.stats = "stopped";
        else reply.error = String(e.message || e);
    } finally {
        controller = null;
        setBusy(false);
        save();
        show();
    }
}

function stop() {
    if (controller) controller.abort();
}

function newChat() {
    stop();
    state.messages = [];
    save();
    renderAll();
    $("prompt").focus();
}

async function loadModel() {
    try {
        const r = await fetch("/v1/models", { headers: headers() });
        if (r.ok) $("model").textContent = (await r.json()).data[0].id;
    } catch (e) { /* the name is only decoration */ }
}

document.addEventListener("DOMContentLoaded", () => {
    writeSettings();
    renderAll();
    loadModel();
    $("send").addEventListener("click", send);
    $("stop").addEventListener("click", stop);
    $("new-chat").addEventListener("click", newChat);
    $("toggle-settings").addEventListener("click", () => {
        const s = $("settings"), open = s.hidden;
        s.hidden = !open;
        $("toggle-settings").setAttribute("aria-expanded", String(open));
    });
    for (const id of Object.values(fields)) $(id).addEventListener("change", readSettings);
    $("prompt").addEventListener("keydown", (e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            send();
        }
    });
    $("prompt").focus();
});
