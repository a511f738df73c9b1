// The grading widget's keyboard, appended to grader.js into one ES module (see __init__.py): the
// keys, their dispatch, and the keys typed after Enter, which wait here (the module lives as long
// as the page, across re-mounts of the widget) and are replayed on the next item once it is drawn.

// --- the keyboard: one listener for the page's lifetime, so no key falls between two renders ----

const NOT_TEXT = new Set(["radio", "checkbox", "button", "submit", "reset", "range", "color", "file", "image"]);

function isTextEntry(el) {
  if (!el || !el.tagName) return false;
  const tag = el.tagName.toLowerCase();
  if (tag === "textarea" || tag === "select" || el.isContentEditable) return true;
  return tag === "input" && !NOT_TEXT.has((el.getAttribute("type") || "text").toLowerCase());
}

// Between Enter and the next item on screen, the widget shown is the old item's (or none, while
// Streamlit re-mounts it): keys typed then would land on the item just handed in, or nowhere. They
// wait in `queued`, in order, and `replay` applies them to the next item as if typed there. The
// page's own shortcuts (S skip, B back, F flag, X discard) cannot be replayed from here: one typed
// meanwhile is kept from the old item and reported, with every key after it (they were meant for
// an item after the next).
let awaiting = null; // {annotator, item}: Enter was pressed on this item, the next one is not drawn yet
const queued = [];
const PAGE_KEYS = new Set(["s", "b", "f", "x"]);
let lastGradeNames = 4;

function keyOf(e) {
  return e.key.length === 1 ? e.key.toLowerCase() : e.key;
}

function isWidgetKey(key) {
  if (/^[0-9]$/.test(key)) return Number(key) < lastGradeNames;
  return key === "j" || key === "k" || key === "z" || key === "a" || key === "Enter";
}

// one key on the shown item; false when it is not one of the widget's
function act(key, repeat) {
  const top = view.data.grade_names.length - 1;
  if (/^[0-9]$/.test(key) && Number(key) <= top) {
    if (!repeat) grade(view.focus, Number(key), false);
  } else if (key === "j") move(1);
  else if (key === "k") move(-1);
  else if (key === "z") { if (!repeat) restZero(); }
  else if (key === "a") { if (!repeat) accept(); }
  else if (key === "Enter") { if (!repeat) submit(); }
  else return false;
  return true;
}

function plural(n) {
  return n === 1 ? "1 key" : `${n} keys`;
}

function waitingNote() {
  if (!view || !view.root.isConnected) return;
  view.message = `${plural(queued.length)} typed after Enter: they go to the next item once it is drawn.`;
  render(false);
}

function dropQueued(why) {
  if (!queued.length) return;
  const n = queued.length;
  queued.length = 0;
  if (view) view.message = `${plural(n)} typed after Enter ${n === 1 ? "was" : "were"} not applied: ${why}`;
}

function replay() {
  while (queued.length && !awaiting && view && view.root.isConnected) {
    const key = queued[0];
    if (PAGE_KEYS.has(key)) {
      dropQueued(`${key.toUpperCase()} (a page shortcut) does not wait for the next item; press it again.`);
      break;
    }
    queued.shift();
    act(key, false);
  }
  if (view && view.root.isConnected) render(false);
}

function onKey(e) {
  if (e.defaultPrevented) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const target = (e.composedPath && e.composedPath()[0]) || e.target;
  if (isTextEntry(target)) {
    if (e.key === "Escape") target.blur(); // leaves the box (Streamlit saves it), so keys work again
    return;
  }
  if (document.querySelector('[role="dialog"]')) return;
  const key = keyOf(e);
  if (awaiting || queued.length) {
    if (!(isWidgetKey(key) || PAGE_KEYS.has(key))) return;
    if (!e.repeat || key === "j" || key === "k") queued.push(key);
    e.preventDefault();
    e.stopPropagation(); // a page shortcut must not act on the item just handed in
    waitingNote();
    return;
  }
  if (!view || !view.root.isConnected) return;
  if (act(key, e.repeat)) {
    e.preventDefault();
    e.stopPropagation();
  }
}

document.addEventListener("keydown", onKey, true);
