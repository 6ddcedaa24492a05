// cafleet WebUI: what the dashboard (app.js, fleetview.js) and the attention page
// (attention.js) share: element making, the API call, and a dialog's answer buttons.
// Loaded first by both pages.
"use strict";

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

async function api(path, options) {
  const response = await fetch(path, options);
  let body = null;
  try { body = await response.json(); } catch (_) { /* not JSON */ }
  if (response.status === 401) throw new Error(LOGIN_NEEDED);
  if (!response.ok) {
    const reason = body && body.error ? body.error : `HTTP ${response.status}`;
    throw new Error(reason);
  }
  return body;
}

const LOGIN_NEEDED = "Not logged in: open the login link that `cafleet server` printed when it started.";

// A blocked member's dialog (its visible text, as the server escaped it) and one button per
// option (a dialog whose options the screen draws without numbers has them numbered 1..N
// left to right, as the notice numbers them); a button answers through the same path as
// `cafleet member answer`, with the dialog's digest and the label it shows, so a dialog that
// changed meanwhile is refused and nothing is sent.
function dialogBox(memberId, dialog) {
  const box = el("div", "attention-dialog");
  box.dataset.digest = dialog.digest;
  box.append(el("pre", "attention-dialog-text", dialog.text));
  const buttons = el("div", "attention-dialog-options");
  const status = el("span", "attention-dialog-status");
  for (const option of dialog.options) {
    const button = el("button", "secondary", `${option.number}. ${option.label}`);
    button.type = "button";
    button.dataset.choice = String(option.number);
    button.addEventListener("click", () => answerDialog(memberId, option, dialog.digest, buttons, status));
    buttons.append(button);
  }
  buttons.append(status);
  box.append(buttons);
  if (dialog.numbered === false && dialog.options.length) {
    box.append(el("span", "attention-dialog-hint muted", "its buttons, numbered left to right"));
  }
  return box;
}

async function answerDialog(memberId, option, digest, buttons, status) {
  for (const button of buttons.querySelectorAll("button")) button.disabled = true;
  status.dataset.kind = "";
  status.textContent = "answering…";
  try {
    const record = await api(`/api/members/${memberId}/answer`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ choice: option.number, dialog: digest, label: option.label }),
    });
    status.textContent = `answered ${record.choice}. ${record.label}`;
  } catch (error) {
    status.dataset.kind = "error";
    status.textContent = error.message;
    for (const button of buttons.querySelectorAll("button")) button.disabled = false;
  }
}

