// cafleet WebUI: the attention page (/attention), made for a phone. The blocked members of
// every fleet, oldest first, each with its dialog and one button per option (answered
// through the same checked path as `cafleet member answer`). It asks GET /api/attention
// every few seconds while it is shown; a list that did not change is not redrawn, so a
// button being pressed never disappears under a finger.
"use strict";

const WAITING_REFRESH_MS = 5000;
let shown = null;  // the last list drawn, as JSON

function waitingKey(items) {
  return JSON.stringify(items.map((item) => [item.member_id, item.dialog && item.dialog.digest, item.detail]));
}

function drawWaiting(items) {
  const list = document.getElementById("waiting");
  document.getElementById("waiting-empty").hidden = items.length > 0;
  document.getElementById("waiting-count").textContent = items.length ? `${items.length} waiting` : "";
  document.title = items.length ? `(${items.length}) cafleet: waiting for you` : "cafleet: waiting for you";
  list.replaceChildren();
  for (const item of items) {
    const row = el("li", "waiting-item");
    row.dataset.memberId = String(item.member_id);
    const head = el("div", "waiting-head");
    head.append(el("strong", null, `${item.name || "member"}#${item.member_id}`),
      el("span", "muted", ` in ${item.fleet || "fleet"}#${item.fleet_id}`));
    if (item.since) head.append(el("span", "muted waiting-since", ` since ${sinceText(item.since)}`));
    row.append(head);
    if (item.dialog) row.append(dialogBox(item.member_id, item.dialog));
    else row.append(el("p", "hint", `${item.detail} (answer it in its pane: cafleet member capture ${item.member_id})`));
    list.append(row);
  }
}

function sinceText(stamp) {
  // stored in UTC with microseconds; shown in the phone's own time zone
  const date = new Date(stamp.replace(/(\.\d{3})\d+/, "$1"));
  return Number.isNaN(date.getTime()) ? stamp : date.toLocaleTimeString();
}

async function refreshWaiting() {
  try {
    const answer = await api("/api/attention");
    document.getElementById("banner").hidden = true;
    const key = waitingKey(answer.items);
    if (key !== shown) {
      shown = key;
      drawWaiting(answer.items);
    }
  } catch (error) {
    const banner = document.getElementById("banner");
    banner.textContent = error.message;
    banner.hidden = false;
  }
}

function startWaiting() {
  refreshWaiting();
  setInterval(() => { if (!document.hidden) refreshWaiting(); }, WAITING_REFRESH_MS);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshWaiting(); });
}

startWaiting();
