// The chat page: sends questions, reads the run's SSE stream, renders steps, queries and the answer.
"use strict";

const state = {
  conversationId: null,
  busy: false,
  token: localStorage.getItem("agentToken") || "",
};

const $ = (selector, root = document) => root.querySelector(selector);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
};

// ---------- HTTP ----------

function headers(extra = {}) {
  return state.token ? { ...extra, Authorization: `Bearer ${state.token}` } : extra;
}

// Requests refused at once share one dialog; each goes again with the token given.
let tokenAsked = null;

async function api(path, options = {}) {
  const sent = state.token;
  const response = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (response.status !== 401) return response;
  if (document.body.dataset.signIn === "oidc") return signInAgain(response);
  if (state.token !== sent) return api(path, options); // another request was given a token meanwhile
  tokenAsked = tokenAsked || askToken(Boolean(sent)).finally(() => { tokenAsked = null; });
  return (await tokenAsked) ? api(path, options) : response;
}

// Where people sign in, a session that ended (signed out elsewhere, or past its lifetime) signs in again
// and comes back to this page.
function signInAgain(response) {
  const back = window.location.pathname + window.location.search;
  window.location.assign(`/auth/sign-in?next=${encodeURIComponent(back)}`);
  return response;
}

// Who is signed in, beside the sign-out button (only where people sign in with OpenID Connect).
async function showSignedIn() {
  const box = $("#signed-in");
  if (!box || document.body.dataset.signIn !== "oidc") return;
  const response = await api("/api/me");
  if (!response.ok) return;
  const me = await response.json();
  $("#signed-in-name").textContent = me.name || me.email || "";
  box.hidden = false;
  $("#sign-out").addEventListener("click", async () => {
    const done = await fetch("/auth/sign-out", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: "{}",
    });
    if (done.ok) window.location.assign("/auth/signed-out");
  });
}

// The access token, asked in the page; a token the server refused says so. Resolves to the token, or
// null when the person dismisses the dialog (the request then fails with the server's own words).
async function askToken(refused) {
  const dialog = $("#token-dialog");
  if (!dialog) return null;
  $("#token-wrong").hidden = !refused;
  const input = $("#token-input");
  input.value = "";
  const answer = await showDialog(dialog);
  const token = answer === "ok" ? input.value.trim() : "";
  if (!token) return null;
  state.token = token;
  localStorage.setItem("agentToken", token);
  return token;
}

// Opens a <dialog> modally; resolves to its return value: "ok" when its form was sent, "" otherwise.
function showDialog(dialog) {
  return new Promise((resolve) => {
    dialog.returnValue = "";
    dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true });
    dialog.showModal();
  });
}

async function errorMessage(response) {
  try {
    return (await response.json()).error || `${response.status} ${response.statusText}`;
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

// Reads a text/event-stream body and calls onEvent(name, data, id) for each event.
async function readEvents(response, onEvent) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { name: "message", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    const lines = buffer.split(/\r\n|\r|\n/);
    buffer = lines.pop();
    for (const line of lines) {
      if (line === "") {
        if (event.data.length) onEvent(event.name, JSON.parse(event.data.join("\n")), event.id);
        event = { name: "message", data: [], id: null };
      } else if (line.startsWith(":")) {
        continue; // keep-alive comment
      } else {
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        const text = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event.name = text;
        else if (field === "data") event.data.push(text);
        else if (field === "id") event.id = text;
      }
    }
  }
}

// ---------- rendering one turn ----------

class TurnView {
  constructor(question) {
    this.runId = null;
    this.questionText = question;
    this.answerText = "";
    this.renderScheduled = false;
    this.queries = new Map();
    this.results = new Map(); // each query's result, by its label: what "Repeat…" may re-run or watch
    this.root = el("article", { class: "turn" },
      (this.question = el("div", { class: "bubble user", text: question })),
      (this.steps = el("div", { class: "steps" })),
      (this.answer = el("div", { class: "bubble answer markdown", "aria-busy": "true" })),
      (this.charts = el("div", { class: "charts" })),
      (this.footer = el("div", { class: "turn-footer" })));
    this.status = el("div", { class: "working", text: "Sending…" });
    this.steps.append(this.status);
    $("#messages").append(this.root);
  }

  handle(name, data) {
    this.runId = data.run_id || this.runId;
    const handler = this[`on_${name}`];
    if (handler) handler.call(this, data);
    scrollToBottom();
  }

  // The server has the question and the run has begun; the model's first words may take a while.
  on_started(data) {
    this.status.textContent = "Working…";
    if (data.question) this.question.textContent = this.questionText = data.question;
  }

  on_thinking(data) {
    this.steps.insertBefore(el("div", { class: "step thinking" }, el("span", { class: "step-icon", "aria-hidden": "true", text: "∴" }),
      el("span", { text: data.text })), this.status);
  }

  // The run went on with the next model of its list: a short note among the steps.
  on_fallback(data) {
    this.steps.insertBefore(el("div", { class: "step thinking fallback" }, el("span", { class: "step-icon", "aria-hidden": "true", text: "↪" }),
      el("span", { text: data.note })), this.status);
  }

  // A report's live plan: each step of its loop, running then done, with what it has spent of its budget.
  on_step(data) {
    this.stepLines = this.stepLines || new Map();
    let line = this.stepLines.get(data.number);
    if (!line) {
      line = el("div", { class: "step report-step" });
      this.stepLines.set(data.number, line);
      this.steps.insertBefore(line, this.status);
    }
    line.className = `step report-step ${data.state}`;
    line.textContent = `${data.number}. ${data.title} · ${data.used.queries} of ${data.budget.queries} queries`;
  }

  on_executing(data) {
    const card = queryCard(this.runId, data);
    this.queries.set(data.query_id, card);
    this.results.set(data.query_id, { question: data.question });
    this.steps.insertBefore(card, this.status);
  }

  on_result(data) {
    const card = this.queries.get(data.query_id);
    if (card) fillResult(card, data);
    this.results.set(data.query_id, { ...this.results.get(data.query_id), ...data }); // its question came with `executing`
  }

  on_answer(data) {
    this.answerText = data.restart ? "" : this.answerText + data.text;
    if (!this.renderScheduled) {
      this.renderScheduled = true;
      requestAnimationFrame(() => {
        this.renderScheduled = false;
        // A frame that comes after finish() would paint over the final answer (and its figure marks).
        if (!this.finished) renderMarkdown(this.answer, this.answerText, this.runId);
      });
    }
  }

  // A chart the program built from a query's full result; drawn under the answer.
  on_chart(data) {
    const chart = data.chart;
    const canvas = el("div", { class: "chart-canvas", role: "img", "aria-label": chartLabel(chart) });
    const cardId = `q-${this.runId}-${chart.query_id}`;
    const caption = el("figcaption", {},
      el("span", { class: "badge", text: chart.id }),
      el("span", { text: ` ${chartLabel(chart)} ` }),
      el("a", { href: `#${cardId}`, class: "open-query", text: `Open ${chart.query_id}`,
        onclick: (event) => { event.preventDefault(); focusQuery(cardId); } }));
    this.charts.append(el("figure", { class: "chart", id: `chart-${this.runId}-${chart.id}` }, canvas, caption));
    if (window.drawChart) {
      window.drawChart(canvas, chart).catch((error) => canvas.replaceChildren(
        el("p", { class: "error-box", text: `The chart could not be drawn: ${error.message}` })));
    }
  }

  on_followups(data) {
    const list = el("div", { class: "followups", role: "group", "aria-label": "Follow-up questions" });
    for (const question of data.questions) {
      list.append(el("button", { type: "button", class: "followup", text: question, onclick: () => ask(question) }));
    }
    this.footer.append(list);
  }

  // The error, and a way to ask the same question again (in the same conversation).
  on_error(data) {
    const retry = el("button", { type: "button", class: "retry", text: "Try again",
      onclick: () => ask(this.questionText) });
    this.footer.prepend(el("div", { class: "error-box", role: "alert" }, el("span", { text: data.message }), retry));
  }

  on_done(data) {
    this.finish(data.result);
    if (data.result && data.result.report) this.linkReport(data.result.report);
  }

  // The way to a report's page (`done`'s report, or a stored turn's): how it ended and what it found.
  linkReport(report) {
    this.footer.prepend(el("p", { class: "report-link" },
      el("a", { href: `/reports/${report.id}`, text: "Open the report" }),
      el("span", { class: "muted", text: ` (${report.outcome.replace("_", " ")}, ${report.findings} finding${report.findings === 1 ? "" : "s"})` })));
  }

  finish(result, feedback = null) {
    this.finished = true;
    this.status.remove();
    this.answer.removeAttribute("aria-busy");
    if (result) {
      this.answerText = result.answer;
      renderMarkdown(this.answer, result.answer, this.runId);
      if (result.outcome === "cancelled") this.answer.classList.add("cancelled");
      if (result.figures) markFigures(this.answer, result.figures);
      const notes = [unverifiedNote(result.figures), receiptLine(result.receipt)].filter(Boolean);
      this.answer.after(...notes);
      if (this.runId && result.outcome !== "error" && !this.noActions) {
        this.root.dataset.runId = this.runId;
        this.footer.append(el("div", { class: "turn-actions" }, thumbs(this.runId, feedback),
          window.repeatButton && result.outcome !== "cancelled" ? repeatButton(this) : null));
      }
    }
    quietFixedFailures(this.queries);
    for (const card of this.queries.values()) card.classList.add("downloadable");
  }
}

// Thumbs under an answer: stored with the turn; `agent knowledge review` turns them into verified
// queries (up) or eval cases (down, with the reason given here).
function thumbs(runId, chosen) {
  const group = el("div", { class: "thumbs", role: "group", "aria-label": "Was this answer right?" });
  const send = async (value) => {
    const reason = value === "down" ? await askReason() : null;
    if (value === "down" && reason === null) return; // dismissed: no thumb, and nothing said
    const response = await api(`/api/runs/${runId}/feedback`, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ value, reason: reason || null }),
    });
    if (!response.ok) return showBanner(await errorMessage(response));
    mark(value);
    if (!$(".thanks", group)) group.append(el("span", { class: "thanks", text: "Thanks, noted." }));
  };
  const up = el("button", { type: "button", class: "thumb", "aria-label": "Right answer", text: "👍", onclick: () => send("up") });
  const down = el("button", { type: "button", class: "thumb", "aria-label": "Wrong answer", text: "👎", onclick: () => send("down") });
  const mark = (value) => {
    up.setAttribute("aria-pressed", String(value === "up"));
    down.setAttribute("aria-pressed", String(value === "down"));
  };
  mark(chosen);
  group.append(up, down);
  return group;
}

// What was wrong with an answer, asked in the page: the text (maybe empty) when sent, null when dismissed.
async function askReason() {
  const dialog = $("#reason-dialog");
  $("#reason-input").value = "";
  return (await showDialog(dialog)) === "ok" ? $("#reason-input").value.trim() : null;
}

function chartLabel(chart) {
  const y = (chart.spec.encoding.y && chart.spec.encoding.y.title) || "count";
  const rows = `${chart.rows} row${chart.rows === 1 ? "" : "s"}`;
  const cap = chart.capped ? `, first ${rows}` : `, ${rows}`;
  return `${chart.kind.replace("_", " ")} chart of ${y} by ${chart.spec.encoding.x.title} from ${chart.query_id}${cap}`;
}

// A query's card; once its answer is stored (`.downloadable`), it links to the query's own page.
function queryCard(runId, data) {
  const key = `${runId}-${data.query_id}`;
  const card = el("section", { class: "query running", id: `q-${key}`, tabindex: "-1" });
  const code = el("code", { class: "language-sql", text: data.sql.trim() });
  if (window.hljs) hljs.highlightElement(code);
  const onItsPage = document.body.dataset.page === "query";
  card.append(
    el("header", { class: "query-head" },
      el("span", { class: "badge", text: data.query_id }),
      el("span", { class: "query-question", text: data.question }),
      el("span", { class: "query-status", text: "running…" }),
      onItsPage ? null : el("a", { class: "query-link", href: `/queries/${key}`, text: "Open",
        title: "This query's own page: its SQL, preview and CSV, at a link you can share" })),
    el("details", { class: "sql", open: "" }, el("summary", { text: "SQL" }), el("pre", {}, code)));
  card.dataset.key = key;
  return card;
}

function fillResult(card, data) {
  card.classList.remove("running");
  const status = $(".query-status", card);
  if (data.error) {
    card.classList.add("failed");
    status.textContent = "failed";
    card.append(el("p", { class: "query-error", text: data.error.split("\n")[0].slice(0, 300) }));
    if (data.hint) card.append(el("p", { class: "query-hint", text: `Hint: ${data.hint}` }));
    return;
  }
  // row_count is null where the rows were read under a policy the reader no longer holds (web/withholding.py)
  const rows = data.row_count == null ? "rows withheld" : `${data.row_count}${data.has_more ? "+" : ""} row${data.row_count === 1 ? "" : "s"}`;
  status.textContent = data.reused_from ? `${rows} · same as ${data.reused_from}` : `${rows} · ${data.elapsed_ms} ms`;
  const table = el("table", { class: "preview" });
  table.append(el("thead", {}, el("tr", {}, ...data.columns.map((c) => el("th", { scope: "col", text: c })))));
  const body = el("tbody");
  for (const row of data.rows) body.append(el("tr", {}, ...row.map((v) => el("td", { text: formatCell(v) }))));
  table.append(body);
  const more = data.has_more || data.row_count > data.rows.length ? el("p", { class: "muted", text: "Preview only: download the CSV for every row." }) : null;
  const download = el("button", { type: "button", class: "download", text: "Download CSV", onclick: () => downloadCsv(card.dataset.key) });
  card.append(el("details", { class: "result" }, el("summary", { text: "Preview" }), el("div", { class: "table-wrap" }, table), more), download);
}

function formatCell(value) {
  if (value === null) return "NULL";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// A failed query the agent fixed later is part of the process, not an alarm.
function quietFixedFailures(queries) {
  const cards = [...queries.values()];
  const anySucceeded = cards.some((c) => !c.classList.contains("failed") && !c.classList.contains("running"));
  for (const card of cards) {
    if (card.classList.contains("failed") && anySucceeded) {
      card.classList.add("fixed");
      $(".query-status", card).textContent = "failed, then corrected";
      const sql = $("details.sql", card);
      if (sql) sql.open = false;
    }
  }
}

// ---------- the answer's HTML ----------

// The answer is model output, and the model reads data anyone may have written: its HTML is hostile.
// Markdown's own elements only. Never forms or controls (an injected <form id="composer"> would take
// the next Enter), style (it could hide or fake the page), id or name (they shadow the page's own
// elements), class (it would borrow the page's look, e.g. an error box), or remote images (each view
// would report to their server). The Content-Security-Policy header stops most of these a second time.
const ANSWER_HTML = {
  ALLOWED_TAGS: ["a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "img",
    "li", "ol", "p", "pre", "s", "strong", "sub", "sup", "table", "tbody", "td", "th", "thead", "tr", "ul"],
  ALLOWED_ATTR: ["href", "src", "alt", "title", "align", "start"],
  FORBID_TAGS: ["form", "input", "button", "textarea", "select", "style"],
  FORBID_ATTR: ["id", "name", "style", "class"],
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  // http(s), mailto and relative URLs; never javascript:, data: (except images, which DOMPurify allows) or others.
  ALLOWED_URI_REGEXP: /^(?:(?:https?|mailto):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i,
};

function installSanitizerHooks() {
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A" && node.hasAttribute("href")) {
      node.setAttribute("rel", "noopener noreferrer");
      if (!node.getAttribute("href").startsWith("#")) node.setAttribute("target", "_blank");
    }
    if (node.tagName === "IMG" && !isLocalImage(node.getAttribute("src") || "")) node.removeAttribute("src");
  });
}

// data: images, and this server's static files (not its API: an image must not start a query).
function isLocalImage(src) {
  if (/^data:image\//i.test(src)) return true;
  try {
    const url = new URL(src, location.href);
    return url.origin === location.origin && url.pathname.startsWith("/static/");
  } catch {
    return false;
  }
}

function renderMarkdown(target, text, runId) {
  if (window.marked && window.DOMPurify) target.innerHTML = DOMPurify.sanitize(marked.parse(text), ANSWER_HTML);
  else target.textContent = text;
  linkCitations(target, runId);
}

// [Q1] jumps to its query; [metric: on-time rate] (the team's knowledge) opens the entry it cites.
const CITATION = /(\[Q\d+\]|\[(?:glossary|metric|note|verified): [^\]\n]{1,200}\])/;

function linkCitations(root, runId) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) if (CITATION.test(walker.currentNode.nodeValue)) nodes.push(walker.currentNode);
  for (const node of nodes) {
    const parts = node.nodeValue.split(new RegExp(CITATION.source, "g"));
    const fragment = document.createDocumentFragment();
    for (const part of parts) {
      const match = part.match(/^\[(Q\d+)\]$/);
      if (match) {
        fragment.append(el("a", { class: "cite", href: `#q-${runId}-${match[1]}`, text: part,
          onclick: (event) => { event.preventDefault(); focusQuery(`q-${runId}-${match[1]}`); } }));
      } else if (CITATION.test(part) && part.startsWith("[")) {
        fragment.append(el("button", { type: "button", class: "cite knowledge", text: part,
          onclick: (event) => openKnowledge(event.currentTarget, part) }));
      } else {
        fragment.append(part);
      }
    }
    node.replaceWith(fragment);
  }
}

let knowledgeEntries = null;

async function openKnowledge(button, tag) {
  const open = button.nextElementSibling;
  if (open && open.classList.contains("knowledge-entry")) return open.remove();
  if (knowledgeEntries === null) {
    const response = await api("/api/knowledge");
    knowledgeEntries = response.ok ? (await response.json()).entries : [];
  }
  const entry = knowledgeEntries.find((e) => e.tag === tag);
  const text = entry ? `${entry.text} (${entry.source})` : "This entry is no longer in the team's knowledge.";
  button.after(el("span", { class: "knowledge-entry", role: "note", text }));
}

// ---------- figures checked against their queries, and the receipt ----------

// Each figure of the answer, found in the rendered text in order, is wrapped in a span built with DOM
// calls (text and title only): verified ones name the cell they came from on hover, unverified ones
// say why. A figure not found in the rendered text stays as it is (the note below still lists it).
function markFigures(root, report) {
  const nodes = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => (node.parentElement.closest("a.cite, button.cite, code, pre") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
  });
  while (walker.nextNode()) nodes.push(walker.currentNode);
  let index = 0; // figures come in the order of the text: each is looked for after the one before
  for (const figure of report.figures) {
    for (let i = index; i < nodes.length; i += 1) {
      const at = findFigure(nodes[i].nodeValue, figure.text, 0);
      if (at < 0) continue;
      const rest = nodes[i].splitText(at);
      const after = rest.splitText(figure.text.length);
      const kind = figure.verified ? "verified" : `unverified${uncheckable(figure) ? " unchecked" : ""}`;
      rest.replaceWith(el("span", { class: `figure ${kind}`, tabindex: "0",
        title: figureTitle(figure), "data-figure": figure.text, text: figure.text }));
      nodes[i] = after;
      index = i;
      break;
    }
  }
}

// Where `text` occurs in `value` from `from`, not glued to a letter or digit on either side.
function findFigure(value, text, from) {
  for (let at = value.indexOf(text, from); at >= 0; at = value.indexOf(text, at + 1)) {
    const before = value[at - 1] || " ";
    const after = value[at + text.length] || " ";
    if (!/[\p{L}\p{N}]/u.test(before) && !/\p{N}/u.test(after)) return at;
  }
  return -1;
}

// No query it cites had a result to check it against (as opposed to checked, and not matched).
const uncheckable = (figure) => !figure.verified && Array.isArray(figure.checked_against) && !figure.checked_against.length;
const mismatched = (figure) => !figure.verified && Array.isArray(figure.checked_against) && figure.checked_against.length > 0;

function figureTitle(figure) {
  if (mismatched(figure)) return `Did not match: ${figure.reason}`;
  if (uncheckable(figure)) return `Could not be checked: ${figure.reason}`;
  if (!figure.verified) return `Not verified: ${figure.reason}`; // a report stored before the two were told apart
  const cells = figure.cells.map((c) => `${c.query_id}, ${c.row === null ? "totals" : `row ${c.row}`}, ${c.column}: ${c.value}`);
  const how = figure.how === "cell" ? "From" : `${figure.how[0].toUpperCase()}${figure.how.slice(1)} of`;
  return `${how} ${cells.join("; ")}`;
}

function unverifiedNote(report) {
  if (report && report.unchecked) {
    return el("div", { class: "figure-note", role: "note" }, el("p", { text: `Figures not checked: ${report.unchecked}` }));
  }
  const partly = report && report.partly ? el("p", { class: "unchecked", text: `Not every figure was checked: ${report.partly}.` }) : null;
  if (!report || !report.unverified) return partly && el("div", { class: "figure-note", role: "note" }, partly);
  const failures = report.figures.filter((f) => !f.verified);
  const checked = failures.filter(mismatched);
  const against = [...new Set(checked.flatMap((f) => f.checked_against))];
  const groups = [
    [checked, (n) => `${n} checked against ${listed(against)} did not match:`, "mismatched"],
    [failures.filter(uncheckable), (n) => `${n} could not be checked:`, "unchecked"],
    [failures.filter((f) => !mismatched(f) && !uncheckable(f)), (n) => `${n} could not be verified against the queries cited:`, ""],
  ];
  return el("div", { class: "figure-note", role: "note" }, ...groups.filter(([figures]) => figures.length).flatMap(([figures, heading, kind]) => [
    el("p", { class: kind, text: heading(figures.length === 1 ? "1 figure" : `${figures.length} figures`) }),
    el("ul", { class: kind }, ...figures.map((f) => el("li", {}, el("strong", { text: f.text }), el("span", { text: ` — ${f.reason}` })))),
  ]), ...(partly ? [partly] : []));
}

const listed = (items) => (items.length < 2 ? items.join("") : `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`);

function receiptLine(receipt) {
  return receipt ? el("p", { class: "receipt", text: receipt.text }) : null;
}

function focusQuery(id) {
  const card = document.getElementById(id);
  if (!card) return;
  card.scrollIntoView({ behavior: "smooth", block: "center" });
  card.classList.add("highlight");
  const preview = $("details.result", card);
  if (preview) preview.open = true;
  card.focus({ preventScroll: true });
  setTimeout(() => card.classList.remove("highlight"), 2000);
}

async function downloadCsv(key) {
  const response = await api(`/api/queries/${encodeURIComponent(key)}.csv`);
  if (!response.ok) return showBanner(await errorMessage(response));
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: fileName(response, `${key}.csv`) });
  document.body.append(link);
  link.click();
  link.remove();
  URL.revokeObjectURL(url);
}

// The name the server gave the file (named from the query's question): RFC 6266's UTF-8 one first.
function fileName(response, fallback) {
  const disposition = response.headers.get("Content-Disposition") || "";
  const utf8 = disposition.match(/filename\*=UTF-8''([^;\s]+)/i);
  if (utf8) {
    try {
      return decodeURIComponent(utf8[1]);
    } catch { /* not percent-encoded UTF-8: the plain name below */ }
  }
  const plain = disposition.match(/filename="([^"]+)"/i);
  return plain ? plain[1] : fallback;
}

function scrollToBottom() {
  const messages = $("#messages");
  messages.scrollTop = messages.scrollHeight;
}

function showBanner(message) {
  const banner = $("#banner");
  banner.textContent = message;
  banner.hidden = !message;
}

// ---------- asking and following a run ----------

// `report`: a report on the question (its Report choice), not an answer: POST /api/reports.
async function ask(question, { report = false } = {}) {
  question = question.trim();
  if (!question || state.busy) return;
  setBusy(true);
  showBanner("");
  $("#empty-state").hidden = true;
  const view = new TurnView(question);
  // Kept until the server takes it: a session that ended meanwhile sends the browser to sign in again,
  // and the question is back in the box when it returns (restoreUnsent).
  sessionStorage.setItem("unsentQuestion", question);
  try {
    const response = await api(report ? "/api/reports" : "/api/chat", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ message: question, conversation_id: state.conversationId }),
    });
    if (response.status !== 401) sessionStorage.removeItem("unsentQuestion");
    if (!response.ok) {
      view.on_error({ message: await errorMessage(response) });
      view.finish(null);
      return;
    }
    await follow(view, response);
  } catch (error) {
    view.on_error({ message: `Lost the connection to the server (${error.message}).` });
    view.finish(null);
  } finally {
    setBusy(false);
    loadConversations();
  }
}

// Reads a run's events; if the stream breaks before `done`, reattaches where it left off.
async function follow(view, response, lastId = 0) {
  let done = false;
  for (let attempt = 0; attempt < 5 && !done; attempt += 1) {
    try {
      await readEvents(response, (name, data, id) => {
        lastId = Number(id) || lastId;
        if (data.conversation_id && data.conversation_id !== state.conversationId) {
          state.conversationId = data.conversation_id;
          showAddress(state.conversationId, { push: false }); // a new conversation: "/" becomes its address
        }
        sessionStorage.setItem("activeRun", JSON.stringify({ runId: data.run_id, lastId, conversationId: state.conversationId }));
        view.handle(name, data);
        if (name === "done") done = true;
      });
    } catch (error) { /* the stream broke; reattach below */ }
    if (done || !view.runId) break;
    await new Promise((resolve) => setTimeout(resolve, 300 * (attempt + 1)));
    response = await api(`/api/runs/${view.runId}/events`, { headers: { "Last-Event-ID": String(lastId) } });
    if (!response.ok) break;
  }
  sessionStorage.removeItem("activeRun");
  if (!done) view.finish(null);
}

// After a reload in the middle of an answer, pick the run up again.
async function resumeActiveRun() {
  const saved = JSON.parse(sessionStorage.getItem("activeRun") || "null");
  if (!saved || !saved.runId) return;
  await openConversation(saved.conversationId, { push: false });
  const response = await api(`/api/runs/${saved.runId}/events`);
  if (!response.ok) return sessionStorage.removeItem("activeRun");
  setBusy(true);
  const view = new TurnView("…");
  view.runId = saved.runId;
  try {
    await follow(view, response);
  } finally {
    setBusy(false);
    view.root.remove();
    await openConversation(saved.conversationId, { push: false });
  }
}

function setBusy(busy) {
  state.busy = busy;
  $("#send").disabled = busy;
  $("#send").textContent = busy ? "Working…" : "Ask";
  $("#send-report").disabled = busy;
}

// ---------- conversations ----------

async function loadConversations() {
  const response = await api("/api/conversations");
  if (!response.ok) return;
  const { conversations } = await response.json();
  const list = $("#conversation-list");
  list.replaceChildren(...conversations.map((c) => el("li", { class: c.id === state.conversationId ? "active" : "" },
    el("button", { type: "button", class: "conversation", text: c.title, title: c.title, onclick: () => openConversation(c.id) }),
    el("button", { type: "button", class: "icon-button delete", "aria-label": `Delete “${c.title}”`, text: "×",
      onclick: () => deleteConversation(c.id) }))));
}

// The address of the conversation on screen (/c/<id>, or / for a new chat): a reload, a bookmark or a
// shared link comes back to it. `push` makes a new history entry (a person chose it), else it replaces.
function showAddress(id, { push }) {
  const path = id ? `/c/${id}` : "/";
  if (location.pathname !== path) history[push ? "pushState" : "replaceState"]({ conversationId: id }, "", path);
}

const CONVERSATION_PATH = /^\/c\/([0-9a-f]{32})$/; // web/views/page.py CONVERSATION_ID

function conversationInAddress() {
  const match = location.pathname.match(CONVERSATION_PATH);
  return match ? match[1] : null;
}

async function openConversation(id, { push = true } = {}) {
  const response = await api(`/api/conversations/${id}`);
  if (!response.ok) return showBanner(await errorMessage(response));
  const conversation = await response.json();
  showBanner("");
  state.conversationId = id;
  showAddress(id, { push });
  const messages = $("#messages");
  messages.querySelectorAll(".turn, .conversation-receipt").forEach((node) => node.remove());
  $("#empty-state").hidden = conversation.turns.length > 0;
  for (const turn of conversation.turns) {
    const view = new TurnView(turn.question);
    view.runId = turn.run_id;
    for (const query of turn.queries) { // a stored query row has its events' names (chats/run_view.py)
      view.on_executing(query);
      view.on_result(query);
    }
    view.finish({ answer: turn.answer, outcome: turn.outcome, figures: turn.figures, receipt: turn.receipt }, turn.feedback);
    if (turn.outcome === "error") view.on_error({ message: "This question got no answer: the run failed." });
    for (const chart of turn.charts || []) view.on_chart({ chart });
    if (turn.followups.length) view.on_followups({ questions: turn.followups });
    if (turn.report) view.linkReport(turn.report); // a report turn, reopened: its link as when it ran
  }
  if (conversation.receipt && conversation.turns.length > 1) {
    messages.append(el("p", { class: "conversation-receipt", text: `This conversation: ${conversation.receipt.text}` }));
  }
  closeSidebar();
  loadConversations();
}

async function deleteConversation(id) {
  const response = await api(`/api/conversations/${id}`, { method: "DELETE" });
  if (!response.ok) return showBanner(await errorMessage(response));
  if (id === state.conversationId) newChat({ push: false }); // its address leads nowhere now
  loadConversations();
}

function newChat({ push = true } = {}) {
  state.conversationId = null;
  showAddress(null, { push });
  $("#messages").querySelectorAll(".turn").forEach((turn) => turn.remove());
  $("#empty-state").hidden = false;
  closeSidebar();
  loadConversations();
  $("#question").focus();
}

function closeSidebar() {
  document.body.classList.remove("sidebar-open");
  $("#toggle-sidebar").setAttribute("aria-expanded", "false");
}

// The example questions for an empty chat: written from the schema, so read behind the token.
async function loadExamples() {
  const response = await api("/api/examples");
  if (!response.ok) return;
  const { questions } = await response.json();
  $("#examples").replaceChildren(...questions.map((question) =>
    el("button", { type: "button", class: "example", text: question, onclick: () => ask(question) })));
}

// ---------- one query's own page (/queries/<run>-<Q>: where Slack's answers link) ----------

const QUERY_KEY = /^[0-9a-f]{32}-Q[1-9][0-9]{0,8}$/; // chats/conversations.py QUERY_KEY

async function showQueryPage() {
  try {
    await fillQueryPage();
  } catch (error) {
    showBanner(`The query could not be shown (${error.message}); reload the page to try again.`);
  }
}

async function fillQueryPage() {
  const key = location.pathname.split("/").pop();
  // Only a query's id goes to the API: never "<id>.csv", which is the CSV download's route.
  if (!QUERY_KEY.test(key)) return showBanner("This is not a link to a query.");
  const response = await api(`/api/queries/${key}`);
  if (!response.ok) return showBanner(await errorMessage(response));
  const query = await response.json();
  const data = { ...query, sql: query.sql || "(not kept: the answer was too large to store whole)" };
  document.title = `${query.query_id} ${query.question} · ClickHouse analyst`;
  const answered = new Date(query.answered_at * 1000).toLocaleString();
  $("#query-context").textContent = `${query.query_id} of the answer to “${query.asked}”, answered ${answered}`;
  const card = queryCard(query.run_id, data);
  $("#query").append(card);
  fillResult(card, data);
  const previewNote = $(".result .muted", card);
  if (query.sql) card.classList.add("downloadable"); // stored whole: its CSV can run it again
  else if (previewNote) previewNote.textContent = "Preview only: the full result is no longer kept.";
  const preview = $("details.result", card);
  if (preview) preview.open = true;
}

// ---------- wiring ----------

document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("dialog [data-close]")) {
    button.addEventListener("click", () => button.closest("dialog").close());
  }
  const page = document.body.dataset.page;
  if (page === "missing") return;
  showSignedIn();
  if (page === "query") return showQueryPage();
  if (page === "report") {
    if (window.DOMPurify) installSanitizerHooks();
    return window.showReportPage();
  }
  if (window.DOMPurify) installSanitizerHooks();
  if (page === "schedules" || page === "inbox") return; // schedules.js runs those pages
  const input = $("#question");
  $("#composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = input.value;
    input.value = "";
    ask(question);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("#composer").requestSubmit();
    }
  });
  $("#send-report").addEventListener("click", () => {
    const question = input.value;
    if (!question.trim()) return input.focus();
    input.value = "";
    ask(question, { report: true });
  });
  $("#new-chat").addEventListener("click", () => newChat());
  $("#toggle-sidebar").addEventListener("click", () => {
    const open = document.body.classList.toggle("sidebar-open");
    $("#toggle-sidebar").setAttribute("aria-expanded", String(open));
  });
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") closeSidebar(); });
  loadExamples();
  // Back and forward move between the conversations opened here.
  window.addEventListener("popstate", () => {
    const id = conversationInAddress();
    if (id) openConversation(id, { push: false });
    else newChat({ push: false });
  });
  loadConversations();
  openAtStart();
  restoreUnsent(input);
  input.focus();
});

function restoreUnsent(input) {
  const unsent = sessionStorage.getItem("unsentQuestion");
  sessionStorage.removeItem("unsentQuestion");
  if (unsent && !input.value) input.value = unsent;
}

// A run interrupted by a reload goes on; otherwise the conversation the address names opens.
async function openAtStart() {
  if (sessionStorage.getItem("activeRun")) return resumeActiveRun();
  const id = document.body.dataset.conversation;
  if (id) await openConversation(id, { push: false });
}
