// The Label page's grading widget (st.components.v2, plain ES module: no build step, no network).
//
// Grades change on screen in the keydown handler itself; the server learns about them through an
// ordered stream of events, numbered per (item, page load), that the widget keeps in
// sessionStorage until the server acknowledges them (data.acks), and sends again while it does
// not. The keyboard is keys.js, appended to this file into one module (see __init__.py). Text from
// logs reaches the DOM through textContent only, never as HTML.

const STORE_KEY = "labeler.grader.v1";
const RETRY_MS = 1500;

function newClientId() {
  const bytes = new Uint8Array(9);
  crypto.getRandomValues(bytes);
  return "c" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

const CLIENT = newClientId(); // one stream per item and page load; older page loads' streams are resent as they are

function loadStore() {
  try {
    const s = JSON.parse(sessionStorage.getItem(STORE_KEY) || "null");
    if (s && Array.isArray(s.streams)) return s;
  } catch (e) { /* unreadable storage: start afresh */ }
  return { streams: [] };
}

const store = loadStore();
let view = null; // the mounted widget: root, data, send, focus, ...
let sendCount = 0;
let lastSent = 0;
let waitingSince = 0; // when the oldest unacknowledged change started waiting (or the last ack arrived)
const seenNotes = new Set();

function saveStore() {
  try { sessionStorage.setItem(STORE_KEY, JSON.stringify(store)); } catch (e) { /* full or disabled */ }
}

function streamsOf(annotator, item) {
  return store.streams.filter((s) => s.annotator === annotator && (item === undefined || s.item === item));
}

function ownStream(annotator, item) {
  let s = store.streams.find((x) => x.client === CLIENT && x.annotator === annotator && x.item === item);
  if (!s) {
    s = { client: CLIENT, annotator, item, next: 1, pending: [], created: Date.now() };
    store.streams.push(s);
  }
  return s;
}

function pendingOf(annotator, item) {
  const out = [];
  streamsOf(annotator, item).sort((a, b) => a.created - b.created)
    .forEach((s) => s.pending.forEach((e) => out.push(e)));
  return out;
}

function hasPending() {
  return view !== null && streamsOf(view.data.annotator).some((s) => s.pending.length > 0);
}

// --- what the server said ------------------------------------------------------------------

function takeAcks(data) {
  const match = (s, client, item) => s.client === client && s.item === item && s.annotator === data.annotator;
  let progress = false;
  for (const [client, item, seq] of data.acks || []) {
    for (const s of store.streams.filter((x) => match(x, client, item))) {
      const before = s.pending.length;
      s.pending = s.pending.filter((e) => e.seq > seq);
      s.next = Math.max(s.next, seq + 1); // never reuse a number the server has seen
      progress = progress || s.pending.length < before;
    }
    if (client === CLIENT && item === data.item) {
      const own = ownStream(data.annotator, item);
      own.next = Math.max(own.next, seq + 1);
    }
  }
  for (const [client, item, seq, message] of data.refused || []) {
    for (const s of store.streams.filter((x) => match(x, client, item))) {
      s.pending = s.pending.filter((e) => e.seq > seq);
    }
    note(`${client}|${item}|${seq}|r`, "Not saved: " + message);
  }
  for (const [client, item, seq, message] of data.rejected || []) {
    note(`${client}|${item}|${seq}`, message);
  }
  // a stream is forgotten once nothing of it waits (the shown item's own stream stays; when an item
  // is shown again, data.acks brings back the number its stream had reached)
  store.streams = store.streams.filter((s) => s.pending.length > 0 ||
    (s.client === CLIENT && s.item === data.item && s.annotator === data.annotator));
  if (progress) waitingSince = performance.now();
  saveStore();
}

function note(id, message) {
  if (seenNotes.has(id) || !view) return;
  seenNotes.add(id);
  view.message = message;
}

// --- sending ---------------------------------------------------------------------------------

function flush() {
  if (!view) return;
  const batches = streamsOf(view.data.annotator).filter((s) => s.pending.length > 0)
    .sort((a, b) => a.created - b.created)
    .map((s) => ({ client: s.client, item: s.item, events: s.pending }));
  if (!batches.length) return;
  if (!waitingSince) waitingSince = performance.now();
  sendCount += 1;
  lastSent = performance.now();
  view.send("outbox", { batches, n: sendCount });
}

function push(event) {
  const d = view.data;
  const s = ownStream(d.annotator, d.item);
  if (!hasPending()) waitingSince = performance.now();
  event.seq = s.next;
  event.at = Date.now();
  s.next += 1;
  s.pending.push(event);
  saveStore();
  flush();
}

setInterval(() => {
  if (!view || !view.root.isConnected) return;
  if (hasPending() && performance.now() - lastSent > RETRY_MS) flush();
  showStatus();
}, 500);

// --- grades as shown: the server's, then every change it has not acknowledged -----------------

function grades() {
  const d = view.data;
  const g = new Map(d.chunks.map((c) => [c.doc_pk, c.grade]));
  for (const e of pendingOf(d.annotator, d.item)) {
    if (e.submit) continue;
    g.set(e.doc_pk, e.grade);
  }
  return g;
}

function ungradedRetrieved(g) {
  return view.data.chunks.filter((c) => !c.added && (g.get(c.doc_pk) === null || g.get(c.doc_pk) === undefined));
}

function nextUngraded(g, after) {
  const cs = view.data.chunks;
  const n = cs.length;
  for (let k = 1; k <= n; k++) {
    const i = (after + k) % n;
    const v = g.get(cs[i].doc_pk);
    if (v === null || v === undefined) return i;
  }
  return Math.min(after + 1, n - 1);
}

// --- actions -----------------------------------------------------------------------------------

function grade(index, value, accept) {
  const c = view.data.chunks[index];
  if (!c || view.submitting) return;
  const event = { doc_pk: c.doc_pk, grade: value };
  if (accept) event.accept = true;
  push(event);
  const g = grades();
  view.focus = nextUngraded(g, index);
  view.message = "";
  render(true);
}

function restZero() {
  if (view.submitting) return;
  const g = grades();
  const todo = ungradedRetrieved(g);
  todo.forEach((c) => push({ doc_pk: c.doc_pk, grade: 0 }));
  view.message = todo.length ? "" : "Every retrieved chunk already has a grade.";
  render(false);
}

function accept() {
  const c = view.data.chunks[view.focus];
  if (!c) return;
  if (!c.suggestion) {
    view.message = "The judge has no suggestion for this chunk.";
    render(false);
    return;
  }
  grade(view.focus, c.suggestion.grade, true);
}

function submit() {
  if (view.submitting) return;
  const g = grades();
  const missing = ungradedRetrieved(g);
  if (missing.length) {
    const first = missing[0];
    view.focus = view.data.chunks.indexOf(first);
    view.message = `Chunk #${first.rank ?? first.position} (${first.doc_id}) has no grade yet` +
      (missing.length > 1 ? ` (${missing.length} chunks are ungraded)` : "") + ": grade it, then press Enter.";
    render(true);
    return;
  }
  view.submitting = true;
  view.message = "Submitting…";
  push({ submit: true });
  awaiting = { annotator: view.data.annotator, item: view.data.item };
  render(false);
}

function move(step) {
  const n = view.data.chunks.length;
  if (!n) return;
  view.focus = (view.focus + step + n) % n;
  render(true);
}


// --- drawing -----------------------------------------------------------------------------------

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function build(root) {
  root.querySelectorAll(":scope > .lb-grader").forEach((old) => old.remove()); // (not the <style> next to it)
  const box = el("div", "lb-grader");
  const bar = el("div", "lb-bar");
  const status = el("div", "lb-status");
  status.append(el("span", "lb-count"), el("span", "lb-save"), el("span", "lb-msg"));
  box.append(bar, status, el("div", "lb-list"));
  root.append(box);
  box.addEventListener("click", onClick);
  return box;
}

function onClick(e) {
  const b = e.target.closest("[data-act]");
  const row = e.target.closest(".lb-chunk");
  if (!b) {
    if (row) {
      view.focus = Number(row.dataset.index);
      render(false);
    }
    return;
  }
  const act = b.dataset.act;
  if (act === "grade") grade(Number(b.dataset.index ?? view.focus), Number(b.dataset.grade), false);
  else if (act === "accept") grade(Number(b.dataset.index ?? view.focus), Number(b.dataset.grade), true);
  else if (act === "rest") restZero();
  else if (act === "acceptFocused") accept();
}

function button(text, act, extra, title) {
  const b = el("button", "lb-btn", text);
  b.type = "button";
  b.dataset.act = act;
  Object.entries(extra || {}).forEach(([k, v]) => { b.dataset[k] = String(v); });
  if (title) b.title = title;
  return b;
}

function drawBar(box) {
  const d = view.data;
  const bar = box.querySelector(".lb-bar");
  bar.textContent = "";
  d.grade_names.forEach((name, g) => bar.append(button(`${g} ${name}`, "grade", { grade: g },
    `Grade the focused chunk ${g} (${name})${d.grade_help[g] ? ": " + d.grade_help[g] : ""}`)));
  bar.append(button("Z rest are 0", "rest", null, "Grade every ungraded retrieved chunk 0"));
  if (d.chunks.some((c) => c.suggestion)) {
    bar.append(button("A accept", "acceptFocused", null,
      "A: take the calibrated judge's suggested grade for the focused chunk"));
  }
}

function drawRows(box) {
  const d = view.data;
  const list = box.querySelector(".lb-list");
  list.textContent = "";
  d.chunks.forEach((c, i) => {
    if (c.added && (i === 0 || !d.chunks[i - 1].added)) list.append(el("div", "lb-section", "Added from search"));
    const row = el("div", "lb-chunk");
    row.dataset.index = String(i);
    row.dataset.doc = String(c.doc_pk);
    const parts = [];
    if (c.rank !== null && c.rank !== undefined) parts.push(`#${c.rank}`);
    if (c.score !== null && c.score !== undefined) parts.push(`score ${Number(Number(c.score).toPrecision(4))}`);
    (c.sources || []).forEach((s) => parts.push(`${s.retriever} #${s.rank}` +
      (s.score !== null && s.score !== undefined ? ` (${Number(Number(s.score).toPrecision(4))})` : "")));
    parts.push(c.doc_id);
    if (c.title) parts.push(c.title);
    const head = el("div", "lb-head", parts.join(" · "));
    if (c.new) head.prepend(el("span", "lb-new", "new chunk"));
    row.append(head);
    row.append(el("div", "lb-text", c.text === null || c.text === undefined
      ? "(no text: ingest a corpus file with this id)" : c.text));
    const line = el("div", "lb-grades");
    d.grade_names.forEach((name, g) => {
      const b = button(String(g), "grade", { grade: g, index: i }, `Grade ${g} (${name})`);
      b.setAttribute("aria-label", `Grade chunk #${c.rank ?? c.position ?? "+"} ${g} ${name}`);
      line.append(b);
    });
    line.append(el("span", "lb-gname"));
    row.append(line);
    if (c.suggestion) {
      const s = c.suggestion;
      const box2 = el("div", "lb-sugg");
      box2.append(el("span", "lb-sugg-text", `Judge suggests ${s.grade} ${d.grade_names[s.grade] ?? ""}` +
        (s.rationale ? ` (${s.rationale})` : "")));
      box2.append(button("Accept", "accept", { grade: s.grade, index: i }, `Grade this chunk ${s.grade}, as the judge suggests`));
      box2.append(el("div", "lb-sugg-source", s.source));
      row.append(box2);
    }
    list.append(row);
  });
}

function showStatus() {
  if (!view) return;
  const box = view.box;
  const save = box.querySelector(".lb-save");
  let state = "saved";
  if (hasPending()) state = performance.now() - waitingSince > RETRY_MS ? "not saved: retrying" : "saving...";
  if (save.textContent !== state) {
    save.textContent = state;
    save.dataset.state = state.startsWith("not") ? "retrying" : state === "saved" ? "saved" : "saving";
  }
}

function render(scroll) {
  const d = view.data;
  const box = view.box;
  const g = grades();
  const rows = box.querySelectorAll(".lb-chunk");
  rows.forEach((row) => {
    const i = Number(row.dataset.index);
    const c = d.chunks[i];
    const v = g.get(c.doc_pk);
    const graded = v !== null && v !== undefined;
    row.dataset.grade = graded ? String(v) : "";
    row.classList.toggle("lb-focused", i === view.focus);
    row.querySelectorAll('.lb-grades [data-act="grade"]').forEach((b) => {
      b.classList.toggle("lb-on", graded && Number(b.dataset.grade) === v);
    });
    const accept = row.querySelector('[data-act="accept"]');
    if (accept) {
      const taken = graded && v === c.suggestion.grade;
      accept.textContent = taken ? "Accepted" : "Accept";
      accept.disabled = taken;
    }
    row.querySelector(".lb-gname").textContent = graded ? `grade: ${d.grade_names[v] ?? v}` : "not graded";
  });
  const retrieved = d.chunks.filter((c) => !c.added).length;
  const done = retrieved - ungradedRetrieved(g).length;
  box.querySelector(".lb-count").textContent = `${done} of ${retrieved} retrieved chunks graded`;
  const msg = box.querySelector(".lb-msg");
  msg.textContent = view.message || "";
  showStatus();
  if (scroll && rows[view.focus]) rows[view.focus].scrollIntoView({ block: "nearest" });
}

// the page's scrolling box (Streamlit's main area), or the document
function scroller(node) {
  for (let n = node && node.parentElement; n; n = n.parentElement) {
    const y = getComputedStyle(n).overflowY;
    if ((y === "auto" || y === "scroll") && n.scrollHeight > n.clientHeight) return n;
  }
  return document.scrollingElement || document.documentElement;
}

// a new item opens at its top: the question, drawn above the widget in the same run, in view
function showTop(box) {
  const sc = scroller(box);
  const question = document.querySelector('.lb-plain[data-key="question"]');
  if (!question) {
    sc.scrollTop = 0;
    return;
  }
  const offset = question.getBoundingClientRect().top - sc.getBoundingClientRect().top;
  if (offset < 0 || question.getBoundingClientRect().bottom > window.innerHeight) sc.scrollTop = 0;
}

function signature(d) {
  return JSON.stringify([d.item, d.annotator, d.grade_names, d.chunks.map((c) => [c.doc_pk, c.text, c.title, c.added, c.suggestion, c.new, c.sources])]);
}

function mountEmpty(parentElement, data) {
  // nothing left in the queue: the widget stays mounted only to say what became of waiting keys
  parentElement.querySelectorAll(":scope > .lb-grader").forEach((old) => old.remove());
  const box = el("div", "lb-grader lb-empty");
  const msg = el("span", "lb-msg");
  box.append(msg);
  parentElement.append(box);
  view = null;
  if (awaiting && awaiting.annotator === data.annotator) awaiting = null;
  if (queued.length) {
    const n = queued.length;
    queued.length = 0;
    msg.textContent = `${plural(n)} typed after Enter ${n === 1 ? "was" : "were"} not applied: nothing left in your queue.`;
  }
}

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  if (!data || !Array.isArray(data.chunks)) return;
  if (data.item === null || data.item === undefined) {
    mountEmpty(parentElement, data);
    return;
  }
  lastGradeNames = data.grade_names.length;
  const sameItem = view && view.data.item === data.item && view.data.annotator === data.annotator;
  const rebuild = !view || view.root !== parentElement || !view.box.isConnected || signature(view.data) !== signature(data);
  const box = rebuild ? build(parentElement) : view.box;
  const prev = view;
  view = { root: parentElement, box, data, send: setStateValue, focus: 0, submitting: false, message: "" };
  takeAcks(data);
  if (sameItem) {
    view.focus = Math.min(prev.focus, Math.max(data.chunks.length - 1, 0));
    view.submitting = prev.submitting && pendingOf(data.annotator, data.item).some((e) => e.submit);
    view.message = view.message || (prev.message === "Submitting…" && !view.submitting ? "" : prev.message);
  } else {
    const g = grades();
    const first = data.chunks.findIndex((c) => g.get(c.doc_pk) === null || g.get(c.doc_pk) === undefined);
    view.focus = first < 0 ? 0 : first;
  }
  let arrived = false;
  if (awaiting && awaiting.annotator !== data.annotator) {
    awaiting = null;
    dropQueued("someone else signed in.");
  } else if (awaiting && awaiting.item !== data.item) {
    awaiting = null; // the next item is here: the keys typed meanwhile are its
    arrived = true;
  } else if (awaiting && !view.submitting) {
    // the server answered the submit and kept the item (refused, or it went to someone else)
    awaiting = null;
    dropQueued("the item was not submitted.");
  }
  if (rebuild) {
    drawBar(box);
    drawRows(box);
  }
  box.dataset.item = String(data.item);
  render(false);
  if (!sameItem) showTop(box);
  if (arrived || (!awaiting && queued.length)) replay();
  // after a reload, changes of the page before wait in storage: send them now; otherwise every key
  // sends at once and the timer resends, so a render never starts a send loop of its own
  if (hasPending() && (lastSent === 0 || performance.now() - lastSent > RETRY_MS)) flush();
}
