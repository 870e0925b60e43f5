// heed console: keeps the server-rendered pages live over server-sent
// events and sends answers and decisions. No framework, no build step.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]')?.content || "";
  const live = document.getElementById("live");
  const say = (text) => { if (live) { live.textContent = text; } };

  async function post(url, body) {
    const res = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(body || {}),
      credentials: "same-origin",
    });
    let data = {};
    try { data = await res.json(); } catch (e) { /* not JSON */ }
    return { ok: res.ok, status: res.status, data };
  }

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  function stream(url, handlers) {
    const es = new EventSource(url);
    for (const [name, fn] of Object.entries(handlers)) {
      es.addEventListener(name, (e) => fn(JSON.parse(e.data)));
    }
    es.addEventListener("reload", () => location.reload());
    return es;
  }

  // Countdowns: every time element with class countdown counts down to its
  // datetime.
  function fmtLeft(ms) {
    if (ms <= 0) { return "0s"; }
    let s = Math.ceil(ms / 1000);
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (h > 0) { return h + "h " + String(m).padStart(2, "0") + "m"; }
    if (m > 0) { return m + "m " + String(s).padStart(2, "0") + "s"; }
    return s + "s";
  }
  function tick() {
    const now = Date.now();
    for (const t of document.querySelectorAll("time.countdown")) {
      const left = Date.parse(t.getAttribute("datetime")) - now;
      t.textContent = fmtLeft(left);
      t.classList.toggle("soon", left < 60000);
    }
  }
  setInterval(tick, 1000);
  tick();

  // ---- Inbox ----
  const inbox = document.getElementById("inbox");
  const count = document.getElementById("inbox-count");
  let total = Number(document.getElementById("total")?.textContent || "0");
  function recount(delta) {
    if (!inbox) { return; }
    total = Math.max(0, total + (delta || 0));
    const shown = inbox.querySelectorAll("article.offer:not(.closed)").length;
    const n = Math.max(total, shown);
    const t = document.getElementById("total");
    if (t) { t.textContent = String(n); }
    if (count) { count.textContent = n ? String(n) : ""; }
    const empty = document.getElementById("empty");
    if (empty) { empty.hidden = n > 0; }
  }
  function current() {
    const f = document.activeElement?.closest?.("article.offer:not(.closed)");
    return f || inbox?.querySelector("article.offer:not(.closed)");
  }
  async function answer(article, choice) {
    if (!article || article.classList.contains("closed") || article.dataset.sending) { return; }
    article.dataset.sending = "1";
    const result = article.querySelector(".result");
    const remember = article.querySelector(".remember-box")?.checked || false;
    const r = await post("/api/answer", { id: article.dataset.id, choice, remember });
    delete article.dataset.sending;
    if (r.ok) {
      result.textContent = "You answered: " + (article.querySelector('button[data-choice="' + CSS.escape(choice) + '"]')?.textContent.replace(/^\s*\d+\s*/, "") || choice);
      close(article, "answered by you");
    } else if (r.status === 409) {
      result.textContent = "Already answered " + (r.data.already || "by someone else");
      close(article, result.textContent);
    } else {
      result.textContent = r.data.error || ("error " + r.status);
      result.classList.add("bad");
    }
  }
  function close(article, text) {
    if (article.classList.contains("closed")) { return; }
    article.classList.add("closed");
    for (const b of article.querySelectorAll("button")) { b.disabled = true; }
    const result = article.querySelector(".result");
    if (result && !result.textContent) { result.textContent = text; }
    say(article.querySelector("h2")?.textContent + ": " + text);
    setTimeout(() => { article.remove(); recount(); }, 4000);
    recount(-1);
  }
  if (inbox) {
    inbox.addEventListener("click", (e) => {
      const b = e.target.closest("button.answer");
      if (b) { answer(b.closest("article.offer"), b.dataset.choice); }
    });
    stream(inbox.dataset.stream, {
      offer: (d) => {
        if (document.getElementById("offer-" + d.id)) { return; }
        const el = fragment(d.html);
        inbox.prepend(el);
        recount(document.body.dataset.ready ? 1 : 0);
        say("New request: " + (el.querySelector("h2")?.textContent || ""));
        tick();
      },
      closed: (d) => {
        const el = document.getElementById("offer-" + d.id);
        if (el) {
          // Your own answer (this page's or another of yours) or someone
          // else's: either way the item closes, saying who answered.
          const text = d.mine ? "You answered: " + d.text.split(": ").pop() : "Already answered " + d.text;
          const result = el.querySelector(".result");
          if (result && !result.textContent) { result.textContent = text; }
          close(el, text);
        }
      },
      sync: (d) => {
        // The whole inbox was sent: drop what is no longer open.
        const open = new Set(d.open);
        for (const el of inbox.querySelectorAll("article.offer:not(.closed)")) {
          if (!open.has(el.dataset.id)) { el.remove(); }
        }
      },
      ready: () => { document.body.dataset.ready = "1"; recount(); },
    });
    document.addEventListener("keydown", (e) => {
      if (e.target.closest?.("input, textarea, select") || e.ctrlKey || e.metaKey || e.altKey) { return; }
      const a = current();
      if (!a) { return; }
      if (e.key >= "1" && e.key <= "9") {
        const b = a.querySelectorAll("button.answer")[Number(e.key) - 1];
        if (b) { e.preventDefault(); answer(a, b.dataset.choice); }
      } else if (e.key === "Enter" && e.target.tagName !== "BUTTON" && e.target.tagName !== "A") {
        e.preventDefault();
        answer(a, a.dataset.default);
      } else if (e.key === "j" || e.key === "k") {
        const all = [...inbox.querySelectorAll("article.offer:not(.closed)")];
        const i = all.indexOf(a) + (e.key === "j" ? 1 : -1);
        if (all[i]) { all[i].focus(); }
      }
    });
    recount();
    const more = document.getElementById("more");
    if (more) {
      more.addEventListener("click", async () => {
        more.disabled = true;
        const res = await fetch("/inbox/more?offset=" + more.dataset.offset, { credentials: "same-origin" });
        const t = document.createElement("template");
        t.innerHTML = await res.text();
        let added = 0;
        for (const el of [...t.content.children]) {
          if (!document.getElementById(el.id)) { inbox.append(el); added++; }
        }
        more.dataset.offset = String(Number(more.dataset.offset) + added);
        const left = Number(res.headers.get("X-Heed-More") || "0");
        if (left > 0) { more.textContent = "Show " + left + " more"; more.disabled = false; } else { more.remove(); }
        tick();
      });
    }
  }

  // ---- A change set ----
  const detail = document.getElementById("setdetail");
  if (detail) {
    detail.addEventListener("click", async (e) => {
      const b = e.target.closest("button.decide");
      if (!b) { return; }
      const body = { verdict: b.dataset.verdict };
      if (b.dataset.all) { body.all = true; } else { body.items = [Number(b.dataset.item)]; }
      const reasonBox = b.closest("li")?.querySelector("input.reason");
      if (reasonBox) { body.reason = reasonBox.value; }
      b.disabled = true;
      const r = await post("/api/changes/" + detail.dataset.id + "/decide", body);
      const result = detail.querySelector(".result");
      if (!r.ok) {
        b.disabled = false;
        if (result) { result.textContent = r.data.error || ("error " + r.status); }
      } else if (result) {
        result.textContent = "Decided: " + (r.data.decided || []).map((d) => d.item + " " + d.verdict).join(", ");
      }
    });
    stream(detail.dataset.stream, {
      card: (d) => {
        // Patch what changed, item by item: an item being decided or typed
        // in is left alone while the others (decided elsewhere, applied)
        // are redrawn, so a click never lands on a node just replaced.
        const next = fragment(d.html);
        const cur = detail.querySelector("section.set-detail");
        const same = cur && next && [...next.querySelectorAll("li.item")].every((li) => cur.querySelector("#" + li.id));
        if (!same) {
          detail.replaceChildren(next);
          document.body.dataset.ready = "1";
          return;
        }
        for (const li of next.querySelectorAll("li.item")) {
          const old = cur.querySelector("#" + li.id);
          if (old.outerHTML === li.outerHTML) { continue; }
          const box = old.querySelector("input.reason");
          const typed = box ? box.value : "";
          const focused = box && document.activeElement === box;
          const caret = focused ? box.selectionStart : null;
          old.replaceWith(li);
          const nb = li.querySelector("input.reason");
          if (nb && typed) { nb.value = typed; }
          if (nb && focused) { nb.focus(); if (caret !== null) { nb.setSelectionRange(caret, caret); } }
        }
        for (const sel of [".meta", ".confirm-all"]) {
          const a = cur.querySelector(sel), b = next.querySelector(sel);
          if (a && b) { if (a.outerHTML !== b.outerHTML) { a.replaceWith(b); } }
          else if (a) { a.remove(); }
          else if (b) { cur.querySelector(".result")?.before(b); }
        }
        document.body.dataset.ready = "1";
      },
    });
  }

  // ---- Runs ----
  const runs = document.getElementById("runs");
  if (runs) {
    stream(runs.closest("table").dataset.stream, {
      run: (d) => {
        const el = fragment("<table><tbody>" + d.html + "</tbody></table>").querySelector("tr");
        const old = document.getElementById("run-" + d.id);
        if (old) { old.replaceWith(el); } else { runs.prepend(el); }
      },
    });
  }
  const timeline = document.getElementById("timeline");
  if (timeline) {
    stream(timeline.closest("table").dataset.stream, {
      event: (d) => {
        const el = fragment("<table><tbody>" + d.html + "</tbody></table>").querySelector("tr");
        // Rows come from the log with their sequence: in log order on the
        // page, each once (the run's and its confirmations' come from
        // followers of their own).
        const seq = Number(el.dataset.seq);
        if (timeline.querySelector('tr[data-seq="' + seq + '"]')) { return; }
        const later = [...timeline.querySelectorAll("tr[data-seq]")].find((tr) => Number(tr.dataset.seq) > seq);
        if (later) { later.before(el); } else { timeline.append(el); }
        const st = document.getElementById("run-status");
        if (st && d.status) { st.textContent = d.status; }
      },
    });
  }
  const actions = document.querySelector(".run-actions");
  if (actions) {
    actions.addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = e.target;
      const body = {};
      for (const [k, v] of new FormData(f)) { body[k] = v; }
      const result = actions.querySelector(".result");
      if (body.args !== undefined) {
        try { body.args = JSON.parse(body.args || "{}"); } catch (err) { result.textContent = "args: not JSON"; return; }
      }
      const r = await post("/api/runs/" + actions.dataset.run + "/" + f.dataset.action, body);
      result.textContent = r.ok ? (f.dataset.action + ": " + (r.data.status || "done")) : (r.data.error || ("error " + r.status));
    });
  }

  // ---- Learned state ----
  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button.forget");
    if (!b) { return; }
    b.disabled = true;
    const r = await post("/api/learned/" + b.dataset.kind + "/" + b.dataset.id + "/forget");
    const result = document.querySelector("main .result");
    if (r.ok) { b.closest("tr")?.remove(); if (result) { result.textContent = "Forgotten: " + b.dataset.id; } }
    else { b.disabled = false; if (result) { result.textContent = r.data.error || ("error " + r.status); } }
  });
})();
