// The dashboard's one script (served from the dashboard itself; the Content-Security-Policy
// allows this file and nothing else: no inline script, no eval). Every page works without it:
// it adds copy buttons to ids and, on a task's page, streams the task's events in (SSE) where
// the page would otherwise reload itself. Values are only ever set as text, never as markup.
"use strict";

(function () {
  function copyButtons() {
    document.querySelectorAll("button.copy[data-copy]").forEach(function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        var value = button.getAttribute("data-copy") || "";
        var done = function () {
          button.textContent = "copied";
        };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(value).then(done, function () {
            select(button);
          });
        } else {
          select(button);
        }
      });
    });
  }

  function select(button) {
    // No clipboard (plain http on another host): select the id so Ctrl+C copies it.
    var code = button.parentNode.querySelector("code");
    if (!code) return;
    var range = document.createRange();
    range.selectNodeContents(code);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    button.textContent = "selected: Ctrl+C";
  }

  function cell(row, text, className) {
    var td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function addEvent(body, event) {
    var row = document.createElement("tr");
    row.className = "live-event";
    row.setAttribute("data-event-id", String(event.id));
    cell(row, event.when);
    cell(row, event.run_id || "task", "mono");
    cell(row, event.kind);
    var td = cell(row, "");
    var pre = document.createElement("pre");
    pre.textContent = event.data;
    td.appendChild(pre);
    body.appendChild(row);
  }

  function live() {
    var box = document.getElementById("live");
    if (!box || !window.EventSource) return;
    var status = document.getElementById("live-status");
    var body = document.querySelector("#events tbody");
    var empty = document.getElementById("events-empty");
    var source = new EventSource(box.getAttribute("data-src"));
    status.textContent = "live: connecting";
    source.addEventListener("open", function () {
      status.textContent = "live: events stream in as they happen";
      box.setAttribute("data-live", "open");
    });
    source.addEventListener("rail-event", function (message) {
      var event = JSON.parse(message.data);
      if (document.querySelector('#events tr[data-event-id="' + event.id + '"]')) return;
      if (empty) empty.hidden = true;
      document.getElementById("events").hidden = false;
      addEvent(body, event);
    });
    source.addEventListener("task", function (message) {
      var task = JSON.parse(message.data);
      var state = document.getElementById("task-state");
      state.textContent = task.state;
      state.className = "pill s-" + task.state;
      document.getElementById("task-stage").textContent = task.stage;
    });
    source.addEventListener("end", function (message) {
      source.close();
      var end = JSON.parse(message.data);
      status.textContent = "finished (" + end.outcome + "): reload for the final timeline";
      box.setAttribute("data-live", "finished");
    });
    source.addEventListener("error", function () {
      if (box.getAttribute("data-live") !== "finished") {
        status.textContent = "live: reconnecting";
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    copyButtons();
    live();
  });
})();
