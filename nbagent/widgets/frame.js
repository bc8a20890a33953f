// nbagent ViewFrame: the browser-only part of a chat view (see frame.py).
// - The notice shown after a kernel restart (hidden by view.css until the view is disconnected).
// - The clock of running tool calls: each `.nbagent-tick` span of the view counts up from the
//   seconds the kernel put in its `data-elapsed`, about ten times a second, with no widget
//   traffic. Browser and kernel clocks need not agree: only the elapsed time travels.

function format(seconds) {
  return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(1)} s`;
}

function render({ model, el }) {
  const notice = document.createElement("div");
  notice.className = "nbagent-restart-notice";
  notice.setAttribute("role", "status");
  const draw = () => { notice.textContent = model.get("notice") || ""; }; // text only, never HTML
  model.on("change:notice", draw);
  draw();
  el.appendChild(notice);

  const zero = new WeakMap(); // span -> performance.now() at which its call had run 0 s
  const tick = () => {
    const root = el.closest(".nbagent-chat");
    if (!root || root.classList.contains("jupyter-widgets-disconnected")) return; // the kernel is gone
    for (const span of root.querySelectorAll(".nbagent-tick")) {
      let t0 = zero.get(span);
      if (t0 === undefined) {
        t0 = performance.now() - 1000 * (parseFloat(span.dataset.elapsed) || 0);
        zero.set(span, t0);
      }
      span.textContent = format((performance.now() - t0) / 1000);
    }
  };
  const timer = setInterval(tick, 100);
  return () => {
    clearInterval(timer);
    model.off("change:notice", draw);
  };
}

export default { render };
