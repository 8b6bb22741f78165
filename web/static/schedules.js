// Scheduled questions and alerts: "Repeat…" under an answer in the chat (a dialog in the page), the
// schedules page (/schedules: pause, resume, edit, delete) and the web inbox (/inbox) where deliveries
// arrive, with the unread count in every page's header. Loaded before app.js, whose helpers ($, el, api,
// showDialog, errorMessage, showBanner, TurnView) it calls once the page has loaded.
"use strict";

const WEEKDAYS = { mon: "Monday", tue: "Tuesday", wed: "Wednesday", thu: "Thursday", fri: "Friday", sat: "Saturday", sun: "Sunday" };
const CHANGE = "change";

// ---------- the dialog: one schedule's when, where, how (and an alert's condition) ----------

// What the dialog edits: a new schedule from an answer (`source`: its run id, question and queries), or
// one already made (`schedule`, as GET /api/schedules gives it).
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

  // Whether Slack is a destination here (the server says: only when Slack is configured).
  async loadDestinations() {
    if (this.destinations) return;
    const response = await api("/api/schedules");
    this.destinations = response.ok ? (await response.json()).destinations : { inbox: true, slack: false };
  },

  fill(source, schedule) {
    const form = $("#schedule-form");
    const queries = schedule ? schedule.queries : source.queries;
    $("#schedule-title").textContent = schedule ? "Edit this schedule" : "Repeat this answer";
    $("#schedule-question").textContent = `From the answer to “${schedule ? schedule.question : source.question}”`;
    $("#schedule-save").textContent = schedule ? "Save changes" : "Make the schedule";
    $("#schedule-slack-choice").hidden = !this.destinations.slack;
    fillZones();
    fillQueries(queries);
    const when = schedule ? schedule.when : { every: "day", time: "09:00", weekday: "mon", cron: "", time_zone: browserZone() };
    const where = schedule ? schedule.where : { to: "inbox", channel: "" };
    form.elements.name.value = schedule ? schedule.name : (source.question || "").slice(0, 200);
    check(form, "kind", schedule ? schedule.kind : "schedule");
    form.elements.every.value = when.every;
    form.elements.weekday.value = when.weekday || "mon";
    form.elements.time.value = when.time || "09:00";
    form.elements.cron.value = when.cron || "";
    form.elements.time_zone.value = when.time_zone || browserZone();
    check(form, "to", where.to);
    form.elements.channel.value = where.channel || "";
    const rerunnable = queries.some((q) => q.rerunnable);
    form.querySelector("input[name=how][value=rerun]").disabled = !rerunnable;
    form.querySelector("input[name=kind][value=alert]").disabled = !rerunnable;
    check(form, "how", schedule ? schedule.how : rerunnable ? "rerun" : "afresh");
    const alert = schedule && schedule.alert;
    if (alert) {
      form.elements.query.value = alert.query;
      fillColumns(queries, alert.query);
      form.elements.condition.value = alert.condition;
      form.elements.column.value = alert.column || "";
      form.elements.value.value = alert.condition === CHANGE ? alert.value * 100 : alert.value ?? "";
    } else {
      form.elements.condition.value = "above";
      form.elements.value.value = "";
    }
    showParts(form);
  },

  // The request's body, as web/views/schedules.py reads it.
  body() {
    const form = $("#schedule-form");
    const value = (name) => form.elements[name].value;
    const kind = checked(form, "kind");
    const body = {
      name: value("name").trim(),
      kind,
      when: { every: value("every"), time: value("time"), weekday: value("weekday"), cron: value("cron").trim(), time_zone: value("time_zone").trim() },
      where: { to: checked(form, "to"), channel: value("channel").trim() },
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
      showError(`The server could not be reached (${error.message}); nothing was lost, try again.`);
    } finally {
      button.disabled = false;
    }
  },
};

function alertBody(form) {
  const condition = form.elements.condition.value;
  const raw = form.elements.value.value.trim();
  const number = raw === "" ? null : Number(raw);
  return {
    query: form.elements.query.value,
    condition,
    column: condition === "rows" ? null : form.elements.column.value || null,
    value: condition === "rows" || number === null ? null : condition === CHANGE ? number / 100 : number,
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
  const every = form.elements.every.value;
  const alert = checked(form, "kind") === "alert";
  const condition = form.elements.condition.value;
  $("#schedule-weekday").hidden = every !== "week";
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
    if (event.target.name === "query") fillColumns((scheduleDialog.editing || scheduleDialog.source).queries, event.target.value);
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
  const response = await api("/api/inbox?unread=1");
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
  const paused = schedule.state === "paused";
  const act = (label, action) => el("button", { type: "button", class: "small", text: label, onclick: action });
  const status = { active: "Active", paused: "Paused", stopped: "Stopped" }[schedule.state] || schedule.state;
  return el("li", { class: `schedule ${schedule.state}`, "data-id": schedule.id },
    el("div", { class: "schedule-head" },
      el("span", { class: `kind ${schedule.kind}`, text: schedule.kind === "alert" ? "Alert" : "Answer" }),
      el("strong", { class: "schedule-name", text: schedule.name }),
      el("span", { class: "schedule-state", text: status })),
    el("p", { class: "schedule-summary", text: schedule.summary }),
    schedule.alert ? el("p", { class: "muted", text: `When ${schedule.alert.text}.` }) : null,
    schedule.stopped_reason ? el("p", { class: "error-box", text: schedule.stopped_reason }) : null,
    el("p", { class: "muted", text: timesLine(schedule) }),
    el("div", { class: "schedule-actions" },
      schedule.state === "stopped" ? null : act(paused ? "Resume" : "Pause", () => changeSchedule(schedule, paused ? "resume" : "pause")),
      act("Edit", () => scheduleDialog.open({ schedule })),
      act("Delete", () => deleteSchedule(schedule))));
}

function timesLine(schedule) {
  const when = (seconds) => new Date(seconds * 1000).toLocaleString();
  const next = schedule.state === "active" && schedule.next_at ? `Next: ${when(schedule.next_at)}` : "";
  const last = schedule.last_at ? `Last: ${when(schedule.last_at)}` : "Not run yet";
  return [next, last].filter(Boolean).join(" · ");
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
  $("#delete-name").textContent = schedule.name;
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
    el("button", { type: "button", class: "conversation delivery", "data-id": d.id, title: d.name, onclick: () => openDelivery(d.id) },
      el("span", { class: "delivery-name", text: d.name }),
      el("span", { class: "delivery-when", text: new Date(d.delivered_at * 1000).toLocaleString() })))));
  showUnread();
}

async function openDelivery(id, { push = true } = {}) {
  const response = await api(`/api/inbox/${id}`);
  if (!response.ok) return showBanner(await errorMessage(response));
  const delivery = await response.json();
  showBanner("");
  document.body.dataset.delivery = id;
  if (location.pathname !== `/inbox/${id}`) history[push ? "pushState" : "replaceState"]({ id }, "", `/inbox/${id}`);
  renderDelivery(delivery);
  if (!delivery.read) {
    await api(`/api/inbox/${id}/read`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  }
  document.body.classList.remove("sidebar-open");
  loadDeliveries();
}

// A delivery is an answer like any other: figures checked, the receipt, its queries (each with its page),
// and what changed since the one before.
function renderDelivery(delivery) {
  const messages = $("#messages");
  messages.querySelectorAll(".turn").forEach((node) => node.remove());
  $("#empty-state").hidden = true;
  const head = $("#delivery-head");
  head.hidden = false;
  head.replaceChildren(
    el("h2", { text: delivery.name }),
    el("p", { class: "muted", text: `${delivery.summary} · delivered ${new Date(delivery.delivered_at * 1000).toLocaleString()}` }),
    delivery.changed ? el("p", { class: "changed", role: "note", text: delivery.changed }) : null,
    delivery.note ? el("p", { class: "muted delivery-note", text: delivery.note }) : null,
    el("a", { href: "/schedules", text: "Its schedule" }));
  const view = new TurnView(delivery.question);
  view.runId = delivery.run_id;
  view.noActions = true; // a delivery is not asked again from here, nor thumbed: the schedule is
  for (const query of delivery.queries) {
    view.on_executing(query);
    view.on_result(query);
  }
  view.finish({ answer: delivery.answer, outcome: delivery.outcome, figures: delivery.figures, receipt: delivery.receipt });
}

// ---------- wiring ----------

document.addEventListener("DOMContentLoaded", () => {
  wireScheduleDialog();
  showUnread();
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
