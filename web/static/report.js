// A report's own page (/reports/<id>): its sections, charts and figures checked, each [Qn] opening its
// query's page, downloads (PDF, Markdown), and Resume on a partial report. Uses app.js's helpers (api, el,
// renderMarkdown's sanitizer, markFigures, readEvents); app.js calls showReportPage once the page is ready.
"use strict";

const REPORT_ID = /^[0-9a-f]{32}$/; // web/views/page.py CONVERSATION_ID: a report's id is its first run's
const OUTCOMES = {
  complete: "Report",
  partial: "Partial report: it stopped at a limit",
  cannot_answer: "Cannot answer from the data",
  running: "Being written…",
  failed: "This report could not be written",
};
const LIMIT_NAMES = { steps: "step", tool_calls: "tool-call", queries: "query", minutes: "time", tokens: "token", cost: "cost" };

window.showReportPage = async function showReportPage() {
  try {
    await fillReportPage();
  } catch (error) {
    showBanner(`The report could not be shown (${error.message}); reload the page to try again.`);
  }
};

function reportId() {
  return location.pathname.split("/").pop();
}

async function fillReportPage() {
  const id = reportId();
  if (!REPORT_ID.test(id)) return showBanner("This is not a link to a report.");
  const response = await api(`/api/reports/${id}`);
  if (!response.ok) return showBanner(await errorMessage(response));
  const stored = await response.json();
  document.title = `Report: ${stored.question} · ClickHouse analyst`;
  $("#report-question").textContent = stored.question;
  const outcome = stored.report && stored.state !== "running" ? stored.report.outcome : stored.state;
  const head = $("#report-outcome");
  head.textContent = OUTCOMES[outcome] || outcome;
  head.className = `report-outcome ${outcome}`;
  if (stored.state === "running") return followReport(stored.run_id);
  $("#report").removeAttribute("aria-busy");
  if (stored.report) showReport(stored, stored.report);
}

function showReport(stored, report) {
  const sections = $("#report-sections");
  sections.replaceChildren();
  const add = (title, text, name) => {
    if (!text || !text.trim()) return null;
    const body = el("div", { class: "markdown" });
    renderReportMarkdown(body, text, stored.query_pages);
    markUnverified(body, (report.marks || {})[name] || []);
    const section = el("section", { class: `report-section ${name}`, "data-section": name }, el("h3", { text: title }), body);
    sections.append(section);
    return section;
  };
  add("Answer", report.summary, "summary");
  if (report.findings.length) {
    const list = el("ol", { class: "findings" });
    for (const finding of report.findings) {
      const item = el("li", { class: "finding" });
      const body = el("div", { class: "markdown" });
      renderReportMarkdown(body, finding.text, stored.query_pages);
      markUnverified(body, finding.marks || []);
      item.append(body);
      const chart = report.charts.find((c) => c.id === finding.chart);
      if (chart) item.append(reportChart(chart, stored.query_pages, (report.caption_marks || {})[chart.id] || []));
      list.append(item);
    }
    sections.append(el("section", { class: "report-section findings", "data-section": "findings" }, el("h3", { text: "Findings" }), list));
  }
  add("How this was found", report.method, "method");
  sections.append(queryList(report, stored.query_pages));
  add("Caveats and what remains uncertain", report.caveats, "caveats");
  add("What could not be answered", report.unanswered, "unanswered");
  if (report.outcome === "partial") {
    const limit = LIMIT_NAMES[report.stopped_by] ? `its ${LIMIT_NAMES[report.stopped_by]} limit` : "a limit";
    add("What remains to do", `${report.remaining || ""}\n\n_It stopped at ${limit}._`, "remaining");
  }
  const notes = [unverifiedNote(report.figures), receiptLine(report.receipt)];
  if (stored.rows_hidden) notes.push(el("p", { class: "muted", text: stored.rows_hidden }));
  sections.append(...notes.filter(Boolean));
  showActions(stored, report);
}

// The figures of a section the check could not verify against their cited cells, marked where they stand
// (the server says which: `marks`, by section and finding), each saying why on hover, as an answer's are.
function markUnverified(root, marks) {
  for (const mark of marks) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: (node) => (node.parentElement.closest("a.cite, code, pre, .figure") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
    });
    while (walker.nextNode()) {
      const node = walker.currentNode;
      const at = findFigure(node.nodeValue, mark.text, 0);
      if (at < 0) continue;
      const rest = node.splitText(at);
      rest.splitText(mark.text.length);
      rest.replaceWith(el("span", { class: "figure unverified", tabindex: "0", "data-figure": mark.text,
        title: `Did not match: ${mark.reason || "no cell of the queries it cites gives it"}`, text: mark.text }));
      break;
    }
  }
}

// [Qn] opens the query's own page (its SQL, preview and CSV), in this tab.
function renderReportMarkdown(target, text, pages) {
  if (window.marked && window.DOMPurify) target.innerHTML = DOMPurify.sanitize(marked.parse(text), ANSWER_HTML);
  else target.textContent = text;
  const walker = document.createTreeWalker(target, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) if (/\[Q\d+\]/.test(walker.currentNode.nodeValue)) nodes.push(walker.currentNode);
  for (const node of nodes) {
    const fragment = document.createDocumentFragment();
    for (const part of node.nodeValue.split(/(\[Q\d+\])/)) {
      const match = part.match(/^\[(Q\d+)\]$/);
      const key = match && pages[match[1]];
      fragment.append(key ? el("a", { class: "cite", href: `/queries/${key}`, text: part }) : part);
    }
    node.replaceWith(fragment);
  }
}

function reportChart(chart, pages, marks) {
  const canvas = el("div", { class: "chart-canvas", role: "img", "aria-label": chartLabel(chart) });
  const key = pages[chart.query_id];
  const caption = el("figcaption", {}, el("span", { class: "badge", text: chart.id }), el("span", { text: ` ${chartLabel(chart)} ` }),
    key ? el("a", { class: "open-query", href: `/queries/${key}`, text: `Open ${chart.query_id}` }) : null);
  markUnverified(caption, marks);  // a figure of its title the chart's query does not give
  if (window.drawChart) {
    window.drawChart(canvas, chart).catch((error) => canvas.replaceChildren(
      el("p", { class: "error-box", text: `The chart could not be drawn: ${error.message}` })));
  }
  return el("figure", { class: "chart", id: `chart-${chart.id}` }, canvas, caption);
}

function queryList(report, pages) {
  const list = el("ul", { class: "report-queries" });
  for (const query of report.queries) {
    const key = pages[query.id];
    const rows = query.error ? "failed" : `${query.row_count} row${query.row_count === 1 ? "" : "s"}`;
    list.append(el("li", {}, key ? el("a", { class: "cite", href: `/queries/${key}`, text: query.id }) : el("span", { text: query.id }),
      el("span", { text: ` ${query.question} (${rows})` })));
  }
  return el("section", { class: "report-section queries", "data-section": "queries" }, el("h3", { text: "Queries" }), list);
}

function showActions(stored, report) {
  const actions = $("#report-actions");
  actions.replaceChildren(
    el("button", { type: "button", class: "report-download", text: "Download PDF", onclick: () => download(stored.id, "pdf") }),
    el("button", { type: "button", class: "report-download", text: "Download Markdown", onclick: () => download(stored.id, "md") }));
  if (report.outcome === "partial") {
    actions.prepend(el("button", { type: "button", id: "resume", class: "resume", text: "Resume", onclick: () => resume(stored.id) }));
  }
}

async function download(id, kind) {
  const response = await api(`/api/reports/${id}.${kind}`);
  if (!response.ok) return showBanner(await errorMessage(response));
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: fileName(response, `report-${id}.${kind}`) });
  document.body.append(link);
  link.click();
  link.remove();
  URL.revokeObjectURL(url);
}

// Resume: the rest of the report, its steps shown as they run, then the report read again.
async function resume(id) {
  const button = $("#resume");
  if (button) button.disabled = true;
  showBanner("");
  const response = await api("/api/reports", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ resume: id }),
  });
  if (!response.ok) {
    if (button) button.disabled = false;
    return showBanner(await errorMessage(response));
  }
  $("#report-outcome").textContent = OUTCOMES.running;
  $("#report").setAttribute("aria-busy", "true");
  await showSteps(response);
  await fillReportPage();
}

async function followReport(runId) {
  const response = await api(`/api/runs/${runId}/events`);
  if (response.ok) await showSteps(response);
  await fillReportPage();
}

// The live plan: each step of the run, running then done, with what the report has spent of its budget.
async function showSteps(response) {
  const steps = $("#report-steps");
  const shown = new Map();
  await readEvents(response, (name, data) => {
    if (name !== "step") return;
    const text = `${data.number}. ${data.title}${data.queries.length ? ` (${data.queries.join(", ")})` : ""} · ` +
      `${data.used.queries} of ${data.budget.queries} queries`;
    let line = shown.get(data.number);
    if (!line) {
      line = el("div", { class: "step report-step" });
      shown.set(data.number, line);
      steps.append(line);
    }
    line.className = `step report-step ${data.state}`;
    line.textContent = text;
  });
}
