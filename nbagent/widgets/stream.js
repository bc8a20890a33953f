// nbagent StreamText: streaming assistant text.
// While streaming, the kernel sends only new text ({a: "..."}) at most ~20 times a second, or
// {r: 1} to clear (a retried model call). The text is previewed as light Markdown built with DOM
// calls and textContent only (nothing from the model is ever parsed as HTML here). At the end the
// kernel syncs `text` and `html`: Markdown rendered in the kernel by markdown-it and sanitized by
// nh3 (an allow-list), which replaces the preview.
// With `plain` set (ThinkingText: a model's reasoning) the text goes into a collapsed <details>
// "Thinking" section as textContent only: reasoning is never parsed as HTML, not even at the end.

function inline(parent, text) {
  // `code`, **strong**, *em* / _em_; everything else is a text node
  const re = /(`[^`\n]+`|\*\*[^*\n]+\*\*|__[^_\n]+__|\*[^*\s][^*\n]*\*|_[^_\s][^_\n]*_)/g;
  let last = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
    const tok = m[0];
    let el;
    if (tok[0] === "`") { el = document.createElement("code"); el.textContent = tok.slice(1, -1); }
    else if (tok.startsWith("**") || tok.startsWith("__")) { el = document.createElement("strong"); el.textContent = tok.slice(2, -2); }
    else { el = document.createElement("em"); el.textContent = tok.slice(1, -1); }
    parent.appendChild(el);
    last = m.index + tok.length;
  }
  if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
}

function preview(box, text) {
  box.textContent = "";
  const lines = text.split("\n");
  let para = null, list = null, code = null;
  const close = () => { para = null; list = null; };
  for (const line of lines) {
    if (code) {
      if (/^\s*```/.test(line)) { code = null; continue; }
      code.textContent += line + "\n";
      continue;
    }
    if (/^\s*```/.test(line)) {
      close();
      const pre = document.createElement("pre");
      code = document.createElement("code");
      pre.appendChild(code);
      box.appendChild(pre);
      continue;
    }
    if (!line.trim()) { close(); continue; }
    const h = /^(#{1,6})\s+(.*)$/.exec(line);
    if (h) {
      close();
      const el = document.createElement("h" + h[1].length);
      inline(el, h[2]);
      box.appendChild(el);
      continue;
    }
    const li = /^\s*(?:[-*+]|\d+[.)])\s+(.*)$/.exec(line);
    if (li) {
      para = null;
      if (!list) { list = document.createElement("ul"); box.appendChild(list); }
      const el = document.createElement("li");
      inline(el, li[1]);
      list.appendChild(el);
      continue;
    }
    list = null;
    if (!para) { para = document.createElement("p"); box.appendChild(para); }
    else para.appendChild(document.createElement("br"));
    inline(para, line);
  }
}

function initialize({ model }) {
  // once per model (not per view): every view of this model sees the appended text
  model.on("msg:custom", (msg) => {
    if (msg && typeof msg.a === "string") model.set("text", model.get("text") + msg.a);
    else if (msg && msg.r) model.set("text", "");
  });
}

// Draw now, then at most once per 30 ms while the given traits change; returns the cleanup.
function redrawOn(model, names, draw) {
  let scheduled = false;
  const later = () => {
    if (!scheduled) { scheduled = true; setTimeout(() => { scheduled = false; draw(); }, 30); }
  };
  for (const name of names) model.on(`change:${name}`, later);
  draw();
  return () => { for (const name of names) model.off(`change:${name}`, later); };
}

function renderThinking(model, el) {
  const details = document.createElement("details"); // closed until the person opens it
  details.className = "nbagent-thinking";
  details.style.cssText = "margin:4px 0;font-size:12px;color:var(--jp-ui-font-color2,#666);";
  const summary = document.createElement("summary");
  summary.style.cssText = "cursor:pointer;user-select:none;";
  const body = document.createElement("div");
  body.className = "nbagent-thinking-text";
  body.style.cssText = "white-space:pre-wrap;word-break:break-word;overflow-wrap:anywhere;max-height:20em;" +
    "overflow:auto;margin:4px 0 0 0;padding:4px 8px;border-left:2px solid var(--jp-border-color2,#ddd);";
  details.appendChild(summary);
  details.appendChild(body);
  el.appendChild(details);
  return redrawOn(model, ["text", "done"], () => {
    const text = model.get("text") || "";
    details.style.display = text ? "" : "none"; // nothing yet (or cleared by a retry): hidden
    summary.textContent = model.get("done") ? "Thinking" : "Thinking\u2026";
    // keep following the end while the person reads along at the bottom
    const atEnd = body.scrollHeight - body.scrollTop - body.clientHeight < 8;
    body.textContent = text;
    if (atEnd && details.open) body.scrollTop = body.scrollHeight;
  });
}

function render({ model, el }) {
  if (model.get("plain")) return renderThinking(model, el);
  const box = document.createElement("div");
  // JupyterLab's own Markdown classes: its tables, code and links, in every theme
  box.className = "nbagent-stream nbagent-answer jp-RenderedHTMLCommon jp-RenderedMarkdown";
  box.style.cssText = "font-family:var(--jp-content-font-family,system-ui,sans-serif);" +
    "font-size:var(--jp-content-font-size1,14px);line-height:var(--jp-content-line-height,1.6);" +
    "padding:0;text-align:left;overflow-wrap:anywhere;";
  el.appendChild(box);
  return redrawOn(model, ["text", "html"], () => {
    const html = model.get("html");
    if (html) box.innerHTML = html; // rendered and sanitized in the kernel (markdown-it + nh3)
    else preview(box, model.get("text"));
  });
}

export default { initialize, render };
