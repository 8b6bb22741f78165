// Scheduled questions and alerts: "Repeat…" under an answer in the chat (a dialog in the page), the
// schedules page (/schedules: pause, resume, edit, delete) and the web inbox (/inbox) where deliveries
// arrive, with the unread count in every page's header. Loaded before app.js, whose helpers ($, el, api,
// showDialog, errorMessage, showBanner, TurnView) it calls once the page has loaded.
"use strict";

const CHANGE = "change";

// ---------- the dialog: one schedule's when, where, how (and an alert's condition) ----------

// What the dialog edits: a new schedule from an answer (`source`: its run id, question and queries), or
// one already made (`schedule`, as GET /api/schedules/<id> gives it).
const scheduleDialog = {
  source: null,
  editing: null,
  destinations: null,

  async open({ source = null, schedule = null }) {
    this.source = source;
    this.editing = schedule;
    const dialog = $("#schedule-dialog");
    showError("");
    await this.loadDestinations();
    this.fill(source, schedule);
    dialog.returnValue = "";
    dialog.showModal();
    $("#schedule-name").focus();
  },

  // Whether Slack is a destination here (the server says: only where the Slack bot runs beside the web).
  async loadDestinations() {
    if (this.destinations) return;
    const response = await api("/api/schedules");
    this.destinations = response.ok ? (await response.json()).destinations : { inbox: true, slack: false };
  },

  queries() {
    return (this.editing || this.source).queries;
  },

  fill(source, schedule) {
    const form = $("#schedule-form");
    const field = (name) => form.elements.namedItem(name);
    const queries = this.queries();
    $("#schedule-title").textContent = schedule ? "Edit this schedule" : "Repeat this answer";
    $("#schedule-question").textContent = `From the answer to “${schedule ? schedule.question : source.question}”`;
    $("#schedule-save").textContent = schedule ? "Save changes" : "Make the schedule";
    $("#schedule-slack-choice").hidden = !this.destinations.slack;
    fillZones();
    fillQueries(queries);
    const cadence = schedule ? schedule.cadence : { kind: "daily", at: "09:00", weekday: 0, cron: "", timezone: browserZone() };
    field("title").value = schedule ? schedule.title : (source.question || "").slice(0, 200);
    check(form, "kind", schedule ? schedule.kind : "question");
    field("every").value = cadence.kind;
    field("weekday").value = String(cadence.weekday || 0);
    field("at").value = cadence.at || "09:00";
    field("cron").value = cadence.cron || "";
    field("timezone").value = cadence.timezone || browserZone();
    check(form, "to", schedule && schedule.destination !== "inbox" ? "slack" : "inbox");
    field("channel").value = schedule ? schedule.channel || "" : "";
    const rerunnable = queries.some((q) => q.rerunnable);
    form.querySelector("input[name=how][value=rerun]").disabled = !rerunnable;
    form.querySelector("input[name=kind][value=alert]").disabled = !rerunnable;
    form.querySelector("input[name=kind][value=question]").disabled = Boolean(schedule && schedule.kind === "alert");
    form.querySelector("input[name=kind][value=alert]").disabled ||= Boolean(schedule && schedule.kind !== "alert");
    field("query").disabled = Boolean(schedule); // the query an alert watches is chosen when it is made
    check(form, "how", schedule ? schedule.how : rerunnable ? "rerun" : "ask");
    fillAlert(form, queries, schedule && schedule.alert);
    showParts(form);
  },

  // The request's body, as web/views/schedule_requests.py reads it.
  body() {
    const form = $("#schedule-form");
    const value = (name) => form.elements.namedItem(name).value;
    const kind = checked(form, "kind");
    const body = {
      title: value("title").trim(),
      kind,
      cadence: { kind: value("every"), at: value("at"), weekday: Number(value("weekday")), cron: value("cron").trim(), timezone: value("timezone").trim() },
      destination: { to: checked(form, "to"), channel: value("channel").trim() },
      how: kind === "alert" ? "rerun" : checked(form, "how"),
      alert: kind === "alert" ? alertBody(form) : null,
    };
    if (this.source) body.run_id = this.source.runId;
    return body;
  },

  // Sends the dialog; on a refusal, the dialog stays open with every field as typed and the server's words.
  async save(event) {
    event.preventDefault();
    const button = $("#schedule-save");
    button.disabled = true;
    try {
      const editing = this.editing;
      const response = await api(editing ? `/api/schedules/${editing.id}` : "/api/schedules", {
        method: editing ? "PATCH" : "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(this.body()),
      });
      if (!response.ok) return showError(await errorMessage(response));
      const saved = (await response.json()).schedule;
      $("#schedule-dialog").close("ok");
      document.dispatchEvent(new CustomEvent("schedule-saved", { detail: saved }));
    } catch (error) {
      showError(`The server could not be reached (${error.message}); nothing you typed is lost, try again.`);
    } finally {
      button.disabled = false;
    }
  },
};

function fillAlert(form, queries, alert) {
  const field = (name) => form.elements.namedItem(name);
  if (alert) {
    field("query").value = alert.query;
    fillColumns(queries, alert.query);
    const columns = $("#alert-column");
    if (alert.column && ![...columns.options].some((o) => o.value === alert.column)) {
      columns.append(el("option", { value: alert.column, text: alert.column })); // its answer is gone: the name stays
    }
    field("condition").value = alert.kind;
    field("column").value = alert.column || "";
    field("value").value = alert.kind === "change" ? (alert.share ?? 0) * 100 : alert.threshold ?? "";
    field("every_check").checked = alert.repeat === "every_check";
  } else {
    field("condition").value = "above";
    field("value").value = "";
    field("every_check").checked = false;
  }
}

function alertBody(form) {
  const field = (name) => form.elements.namedItem(name);
  const kind = field("condition").value;
  const raw = field("value").value.trim();
  const number = raw === "" ? null : Number(raw);
  return {
    query: field("query").value,
    kind,
    column: kind === "rows" ? "" : field("column").value,
    threshold: kind === "above" || kind === "below" ? number : null,
    share: kind === "change" && number !== null ? number / 100 : null,
    repeat: field("every_check").checked ? "every_check" : "until_clear",
  };
}

function showError(message) {
  const box = $("#schedule-error");
  box.textContent = message;
  box.hidden = !message;
}

function check(form, name, value) {
  const input = form.querySelector(`input[name=${name}][value="${value}"]`);
  if (input) input.checked = true;
}

const checked = (form, name) => (form.querySelector(`input[name=${name}]:checked`) || {}).value;

function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  } catch {
    return "UTC";
  }
}

function fillZones() {
  const list = $("#schedule-zones");
  if (list.children.length || !Intl.supportedValuesOf) return;
  list.append(...Intl.supportedValuesOf("timeZone").map((zone) => el("option", { value: zone })));
}

// The queries an alert may watch: those of the answer that returned rows (their SQL is what re-runs).
function fillQueries(queries) {
  const select = $("#alert-query");
  const usable = queries.filter((q) => q.rerunnable);
  select.replaceChildren(...usable.map((q) => el("option", { value: q.label, text: `${q.label} · ${q.question}` })));
  fillColumns(queries, select.value);
}

function fillColumns(queries, label) {
  const query = queries.find((q) => q.label === label);
  $("#alert-column").replaceChildren(...(query ? query.columns : []).map((c) => el("option", { value: c, text: c })));
}

// Shows only the parts the choices so far need.
function showParts(form) {
  const every = form.elements.namedItem("every").value;
  const alert = checked(form, "kind") === "alert";
  const condition = form.elements.namedItem("condition").value;
  $("#schedule-weekday").hidden = every !== "weekly";
  $("#schedule-time").hidden = every === "cron";
  $("#schedule-cron").hidden = every !== "cron";
  $("#schedule-channel").hidden = checked(form, "to") !== "slack";
  $("#schedule-how").hidden = alert;
  $("#schedule-alert").hidden = !alert;
  $("#alert-measure").hidden = condition === "rows";
  $("#alert-percent").hidden = condition !== CHANGE;
  $("#alert-value").setAttribute("aria-label", condition === CHANGE ? "Change, in percent" : "Threshold");
}

function wireScheduleDialog() {
  const form = $("#schedule-form");
  if (!form) return;
  form.addEventListener("submit", (event) => scheduleDialog.save(event));
  form.addEventListener("change", (event) => {
    if (event.target.name === "query") fillColumns(scheduleDialog.queries(), event.target.value);
    showParts(form);
  });
}

// ---------- under an answer in the chat ----------

// "Repeat…" under a finished answer (called by app.js's TurnView.finish): the answer's run and queries.
function repeatButton(view) {
  const open = () => scheduleDialog.open({ source: answerSource(view) });
  return el("button", { type: "button", class: "repeat", text: "Repeat…", title: "Make a schedule or an alert from this answer", onclick: open });
}

function answerSource(view) {
  const queries = [...view.results.values()].map((q) => ({
    label: q.query_id,
    question: q.question,
    columns: q.columns || [],
    rerunnable: !q.error && Array.isArray(q.columns) && q.columns.length > 0,
  }));
  return { runId: view.runId, question: view.questionText, queries };
}

function scheduledNote(schedule) {
  return el("p", { class: "scheduled-note", role: "status" },
    el("span", { text: `Scheduled: ${schedule.summary}. ` }),
    el("a", { href: "/schedules", text: "Your schedules" }));
}

// ---------- the unread count in the header ----------

async function showUnread() {
  const badge = $("#unread");
  if (!badge) return;
  const response = await api("/api/inbox/unread");
  if (!response.ok) return;
  const { unread } = await response.json();
  badge.textContent = unread ? String(unread) : "";
  badge.hidden = !unread;
  $("#inbox-link").setAttribute("aria-label", unread ? `Inbox, ${unread} unread` : "Inbox");
}

// ---------- the schedules page ----------

async function loadSchedules() {
  const response = await api("/api/schedules");
  if (!response.ok) return showBanner(await errorMessage(response));
  const { schedules, destinations } = await response.json();
  scheduleDialog.destinations = destinations;
  $("#schedules-empty").hidden = schedules.length > 0;
  $("#schedule-list").replaceChildren(...schedules.map(scheduleItem));
}

function scheduleItem(schedule) {
  const paused = schedule.state !== "active"; // a stopped one resumes too, once what stopped it is put right
  const act = (label, action) => el("button", { type: "button", class: "small", text: label, onclick: action });
  const status = { active: "Active", paused: "Paused", stopped: "Stopped" }[schedule.state] || schedule.state;
  return el("li", { class: `schedule ${schedule.state}`, "data-id": schedule.id },
    el("div", { class: "schedule-head" },
      el("span", { class: `kind ${schedule.kind}`, text: schedule.kind === "alert" ? "Alert" : "Answer" }),
      el("strong", { class: "schedule-name", text: schedule.title }),
      el("span", { class: "schedule-state", text: status })),
    el("p", { class: "schedule-summary", text: schedule.summary }),
    schedule.alert ? el("p", { class: "muted", text: `Posts on ${schedule.alert.text}.` }) : null,
    schedule.stopped_reason ? el("p", { class: "error-box", text: schedule.stopped_reason }) : null,
    el("p", { class: "muted", text: timesLine(schedule) }),
    el("div", { class: "schedule-actions" },
      act(paused ? "Resume" : "Pause", () => changeSchedule(schedule, paused ? "resume" : "pause")),
      act("Edit", () => editSchedule(schedule)),
      act("Delete", () => deleteSchedule(schedule))));
}

function timesLine(schedule) {
  const when = (seconds) => new Date(seconds * 1000).toLocaleString();
  const next = schedule.state === "active" && schedule.next_at ? `Next: ${when(schedule.next_at)}` : "";
  const last = schedule.last_delivered_at ? `Last delivered: ${when(schedule.last_delivered_at)}` : "Not delivered yet";
  return [next, last].filter(Boolean).join(" · ");
}

// The edit dialog wants the schedule whole (each query's columns): read it again.
async function editSchedule(schedule) {
  const response = await api(`/api/schedules/${schedule.id}`);
  if (!response.ok) return showBanner(await errorMessage(response));
  scheduleDialog.open({ schedule: (await response.json()).schedule });
}

async function changeSchedule(schedule, action) {
  const response = await api(`/api/schedules/${schedule.id}/${action}`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: "{}",
  });
  if (!response.ok) return showBanner(await errorMessage(response));
  showBanner("");
  loadSchedules();
}

async function deleteSchedule(schedule) {
  const dialog = $("#delete-dialog");
  $("#delete-name").textContent = schedule.title;
  if ((await showDialog(dialog)) !== "ok") return;
  const response = await api(`/api/schedules/${schedule.id}`, { method: "DELETE" });
  if (!response.ok) return showBanner(await errorMessage(response));
  showBanner("");
  loadSchedules();
}

// ---------- the inbox ----------

const DELIVERY_PATH = /^\/inbox\/([0-9a-f]{32})$/; // web/views/inbox.py DELIVERY_ID

async function loadDeliveries() {
  const response = await api("/api/inbox");
  if (!response.ok) return showBanner(await errorMessage(response));
  const { deliveries } = await response.json();
  const shown = document.body.dataset.delivery;
  $("#inbox-empty").hidden = deliveries.length > 0;
  $("#delivery-list").replaceChildren(...deliveries.map((d) => el("li", { class: [d.read ? "" : "unread-item", d.id === shown ? "active" : ""].join(" ").trim() },
    el("button", { type: "button", class: "conversation delivery", "data-id": d.id, title: d.title, onclick: () => openDelivery(d.id) },
      el("span", { class: "delivery-name", text: d.title }),
      el("span", { class: "delivery-when", text: new Date(d.at * 1000).toLocaleString() })))));
  showUnread();
}

async function openDelivery(id, { push = true } = {}) {
  const response = await api(`/api/inbox/${id}`);
  if (!response.ok) return showBanner(await errorMessage(response));
  const delivery = await response.json();
  showBanner("");
  document.body.dataset.delivery = id;
  if (location.pathname !== `/inbox/${id}`) history[push ? "pushState" : "replaceState"]({ id }, "", `/inbox/${id}`);
  await renderDelivery(delivery);
  if (!delivery.read) {
    await api(`/api/inbox/${id}/read`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  }
  document.body.classList.remove("sidebar-open");
  loadDeliveries();
}

// A delivery is an answer like any other: figures checked, the receipt, its queries (each read through
// the door every answer's queries share, and linked to its page), and what changed since the one before.
async function renderDelivery(delivery) {
  const messages = $("#messages");
  messages.querySelectorAll(".turn").forEach((node) => node.remove());
  $("#empty-state").hidden = true;
  const head = $("#delivery-head");
  head.hidden = false;
  head.replaceChildren(...[
    el("h2", { text: delivery.title }),
    el("p", { class: "muted", text: `Delivered ${new Date(delivery.at * 1000).toLocaleString()}` }),
    delivery.changed ? el("p", { class: "changed", role: "note", text: delivery.changed }) : null,
    delivery.late ? el("p", { class: "muted delivery-late", role: "note", text: delivery.late }) : null,
    el("a", { href: "/schedules", text: "Its schedule" })].filter(Boolean));
  const view = new TurnView(delivery.title);
  view.question.remove(); // nobody asked: the heading above names the schedule
  view.runId = delivery.run_id;
  view.noActions = true; // a delivery is not asked again from here, nor thumbed: its schedule is changed instead
  for (const key of delivery.queries || []) {
    const response = await api(`/api/queries/${encodeURIComponent(key)}`);
    if (!response.ok) continue; // withheld or gone: the answer's text still cites it
    const query = await response.json();
    view.on_executing(query);
    view.on_result(query);
  }
  view.finish({ answer: delivery.text, outcome: delivery.outcome || "answered", figures: delivery.figures, receipt: delivery.receipt });
}

// ---------- wiring ----------

const UNREAD_EVERY_MS = 60_000; // a delivery that arrives while a page is open shows within a minute

document.addEventListener("DOMContentLoaded", () => {
  wireScheduleDialog();
  showUnread();
  setInterval(() => { if (document.visibilityState === "visible") showUnread(); }, UNREAD_EVERY_MS);
  const page = document.body.dataset.page;
  if (page === "schedules") {
    document.addEventListener("schedule-saved", () => loadSchedules());
    loadSchedules();
  } else if (page === "inbox") {
    wireInbox();
  } else if (!page) {
    document.addEventListener("schedule-saved", (event) => showSaved(event.detail));
  }
});

function wireInbox() {
  $("#toggle-sidebar").addEventListener("click", () => {
    const open = document.body.classList.toggle("sidebar-open");
    $("#toggle-sidebar").setAttribute("aria-expanded", String(open));
  });
  window.addEventListener("popstate", () => {
    const match = location.pathname.match(DELIVERY_PATH);
    if (match) openDelivery(match[1], { push: false });
  });
  loadDeliveries();
  if (document.body.dataset.delivery) openDelivery(document.body.dataset.delivery, { push: false });
}

// In the chat: the answer the schedule was made from says so.
function showSaved(schedule) {
  const source = scheduleDialog.source;
  const turn = source && [...document.querySelectorAll(".turn")].find((t) => t.dataset.runId === source.runId);
  if (turn) turn.querySelector(".turn-footer").append(scheduledNote(schedule));
}
