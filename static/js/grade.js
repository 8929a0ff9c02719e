/*
 * ReviewHub grading page: keyboard shortcuts, the severity question, time on task, idempotent
 * submit, lease heartbeat. Plain ES2017, no dependencies; the page works without it too (the
 * form posts normally and the server checks everything again).
 *
 * The "current target" is one criterion's scale, or its severity question while the chosen label
 * is a failure. Digits answer the current target, then it advances: a failing label moves to its
 * severity question, anything else to the next criterion; after the last one, focus lands on
 * Submit. J / K (or Tab / Shift+Tab, or a click) move the current target by hand.
 */
(function () {
  "use strict";

  var form = document.getElementById("grade-form");
  if (!form) { return; }

  var submitButton = document.getElementById("submit-button");
  var statusLine = document.getElementById("grade-status");
  var errorBox = document.getElementById("grade-error");
  var helpPanel = document.getElementById("shortcuts");
  var helpButton = document.getElementById("shortcuts-button");
  var skipForm = document.getElementById("skip-form");
  var monoToggle = document.getElementById("mono-toggle");
  var subject = document.getElementById("subject");
  var contextBox = document.getElementById("context");
  var timerEl = document.getElementById("timer");
  var timeField = form.querySelector("input[name=time_on_task_ms]");
  var idField = form.querySelector("input[name=submission_id]");
  var assignmentId = form.getAttribute("data-assignment");
  var heartbeatUrl = form.getAttribute("data-heartbeat-url");
  var criteria = Array.prototype.slice.call(form.querySelectorAll(".criterion"));
  var current = 0;
  var inFlight = false;
  // "revise": the same controls, but the form posts normally (no queue, no lease, no timer).
  var reviseMode = form.getAttribute("data-mode") === "revise";

  // ---- Submission id: one per assignment, kept across retries and reloads of this tab. ------
  function newUuid() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") {
      return window.crypto.randomUUID();
    }
    // crypto.randomUUID needs a secure context; plain-HTTP deployments fall back to v4 by hand.
    var b = new Uint8Array(16);
    window.crypto.getRandomValues(b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    var h = Array.prototype.map.call(b, function (x) { return (x + 0x100).toString(16).slice(1); });
    return h.slice(0, 4).join("") + "-" + h.slice(4, 6).join("") + "-" + h.slice(6, 8).join("") +
      "-" + h.slice(8, 10).join("") + "-" + h.slice(10).join("");
  }
  var storageKey = "reviewhub:submission:" + assignmentId;
  var memoryStore = {};
  function storeGet(k) { try { return window.sessionStorage.getItem(k); } catch (e) { return memoryStore[k] || null; } }
  function storeSet(k, v) { try { window.sessionStorage.setItem(k, v); } catch (e) { memoryStore[k] = v; } }
  function storeDel(k) { try { window.sessionStorage.removeItem(k); } catch (e) { delete memoryStore[k]; } }
  if (idField) {
    var submissionId = storeGet(storageKey);
    if (!submissionId) {
      submissionId = newUuid();
      storeSet(storageKey, submissionId);
    }
    idField.value = submissionId;
  }

  // ---- Time on task: visible time since the page was shown. ----------------------------------
  var visibleMs = 0;
  var visibleSince = document.visibilityState === "visible" ? performance.now() : null;
  function elapsedMs() {
    return Math.round(visibleMs + (visibleSince === null ? 0 : performance.now() - visibleSince));
  }
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") {
      if (visibleSince === null) { visibleSince = performance.now(); }
    } else if (visibleSince !== null) {
      visibleMs += performance.now() - visibleSince;
      visibleSince = null;
    }
  });
  function renderTimer() {
    if (!timerEl) { return; }
    var s = Math.floor(elapsedMs() / 1000);
    var m = Math.floor(s / 60);
    s = s % 60;
    timerEl.textContent = m + ":" + (s < 10 ? "0" : "") + s;
  }
  renderTimer();
  window.setInterval(renderTimer, 1000);

  // ---- Severity question ---------------------------------------------------------------------
  function labelInputs(crit) {
    return Array.prototype.slice.call(crit.querySelectorAll("input[data-role=label]"));
  }
  function severityBox(crit) { return crit.querySelector(".severity"); }
  // An interval criterion's number input: answered when it holds a number; it fails below
  // its data-threshold (none: no pass/fail reading). The server checks the range again.
  function numberInput(crit) { return crit.querySelector("input[data-number]"); }
  function numberAnswered(input) { return input.value !== "" && !isNaN(Number(input.value)); }
  function isFailing(crit) {
    var num = numberInput(crit);
    if (num) {
      var t = num.getAttribute("data-threshold");
      return t !== null && numberAnswered(num) && Number(num.value) < Number(t);
    }
    var checked = crit.querySelector("input[data-role=label]:checked");
    return !!(checked && checked.getAttribute("data-fails") === "1");
  }
  function isAnswered(input) { return input.hasAttribute("data-number") ? numberAnswered(input) : input.checked; }
  function syncSeverity(crit) {
    var box = severityBox(crit);
    var failing = isFailing(crit);
    crit.classList.toggle("is-failing", failing);
    if (!box) { return; }
    box.hidden = !failing;
    // Disabled controls are not submitted: a pass never carries a severity.
    Array.prototype.forEach.call(box.querySelectorAll("input, textarea"), function (el) {
      el.disabled = !failing;
    });
  }
  criteria.forEach(syncSeverity);

  // ---- Targets and the current one -----------------------------------------------------------
  function targets() {
    var list = [];
    criteria.forEach(function (crit) {
      list.push({ crit: crit, kind: "label", el: crit });
      var box = severityBox(crit);
      if (box && !box.hidden) { list.push({ crit: crit, kind: "severity", el: box }); }
    });
    return list;
  }
  function targetInputs(t) {
    if (t.kind === "severity") {
      return Array.prototype.slice.call(t.el.querySelectorAll("input[type=radio]"));
    }
    return labelInputs(t.crit);
  }
  function paint() {
    var list = targets();
    if (current >= list.length) { current = list.length - 1; }
    criteria.forEach(function (c) { c.classList.remove("is-current"); });
    Array.prototype.forEach.call(form.querySelectorAll(".severity"), function (s) {
      s.classList.remove("is-current");
    });
    var t = list[current];
    if (!t) { return; }
    if (t.kind === "severity") { t.el.classList.add("is-current"); }
    t.crit.classList.add("is-current");
  }
  function focusTarget(t) {
    var inputs = targetInputs(t);
    var checked = inputs.filter(isAnswered)[0];
    var el = checked || inputs[0];
    if (el) {
      el.focus({ preventScroll: true });
      t.el.scrollIntoView({ block: "nearest" });
    }
  }
  function setCurrent(index, focus) {
    var list = targets();
    if (!list.length) { return; }
    current = Math.max(0, Math.min(index, list.length - 1));
    paint();
    if (focus) { focusTarget(list[current]); }
  }
  function indexOf(crit, kind) {
    var list = targets();
    for (var i = 0; i < list.length; i++) {
      if (list[i].crit === crit && list[i].kind === kind) { return i; }
    }
    return 0;
  }
  function advanceFrom(t) {
    var list = targets();
    var i = indexOf(t.crit, t.kind);
    if (t.kind === "label" && isFailing(t.crit)) {
      var box = severityBox(t.crit);
      var answered = box && box.querySelector("input[type=radio]:checked");
      if (!answered) { setCurrent(i + 1, true); return; }
      i += 1; // severity already answered: skip past it
    }
    if (i + 1 < list.length) {
      setCurrent(i + 1, true);
    } else {
      paint();
      submitButton.focus();
    }
  }
  function choose(t, input) {
    input.checked = true;
    input.dispatchEvent(new Event("change", { bubbles: true }));
    advanceFrom(t);
  }

  form.addEventListener("change", function (ev) {
    var el = ev.target;
    var crit = el.closest(".criterion");
    if (crit && el.getAttribute("data-role") === "label") {
      syncSeverity(crit);
      paint();
    }
    clearError();
  });
  // A number is typed, not chosen: the severity question follows it as it changes, and Enter
  // in it moves on (a failing score to its severity) instead of submitting the form.
  form.addEventListener("input", function (ev) {
    var el = ev.target;
    var crit = el.closest(".criterion");
    if (crit && el.hasAttribute("data-number")) { syncSeverity(crit); paint(); }
  });
  form.addEventListener("keydown", function (ev) {
    var el = ev.target;
    if (ev.key !== "Enter" || ev.ctrlKey || ev.metaKey) { return; }
    if (!el.hasAttribute || !el.hasAttribute("data-number")) { return; }
    var crit = el.closest(".criterion");
    if (!crit || !numberAnswered(el)) { return; }
    ev.preventDefault();
    syncSeverity(crit);
    advanceFrom({ crit: crit, kind: "label", el: crit });
  });
  form.addEventListener("focusin", function (ev) {
    var crit = ev.target.closest(".criterion");
    if (!crit) { return; }
    var kind = ev.target.closest(".severity") ? "severity" : "label";
    current = indexOf(crit, kind);
    paint();
  });

  // ---- Messages ------------------------------------------------------------------------------
  function clearError() { if (errorBox) { errorBox.textContent = ""; } }
  function showError(text) {
    errorBox.textContent = text;
    errorBox.focus({ preventScroll: false });
  }
  function setStatus(text, isError) {
    if (!statusLine) { return; }
    statusLine.textContent = text;
    statusLine.classList.toggle("is-error", !!isError);
  }

  // ---- Submit --------------------------------------------------------------------------------
  function missing() {
    var list = targets();
    for (var i = 0; i < list.length; i++) {
      var t = list[i];
      if (!targetInputs(t).some(isAnswered)) { return i; }
    }
    return -1;
  }
  function describe(t) {
    var name = t.crit.getAttribute("data-name");
    return t.kind === "severity"
      ? "Say how bad the failure on \u201c" + name + "\u201d would be."
      : (numberInput(t.crit) ? "Give a score for \u201c" : "Choose a rating for \u201c") +
        name + "\u201d.";
  }
  function errorText(body, status) {
    if (body && body.error) {
      var text = body.error.message || "The server refused this submission.";
      // A validation error lists its problems as {path, message} (docs/api.md, "Errors").
      var listed = (body.error.details && body.error.details.errors) || [];
      var parts = [];
      listed.forEach(function (e) {
        if (e && e.path && e.message && e.message !== text) { parts.push(e.path + ": " + e.message); }
      });
      if (parts.length) { text += " (" + parts.join("; ") + ")"; }
      return text;
    }
    return "The server answered " + status + ".";
  }
  function submit() {
    if (inFlight) { return; }
    var gap = missing();
    if (gap >= 0) {
      var t = targets()[gap];
      setCurrent(gap, true);
      errorBox.textContent = describe(t);
      return;
    }
    clearError();
    if (reviseMode) {
      inFlight = true;
      submitButton.disabled = true;
      form.submit();
      return;
    }
    timeField.value = String(elapsedMs());
    inFlight = true;
    submitButton.disabled = true;
    submitButton.setAttribute("aria-busy", "true");
    setStatus("Saving\u2026", false);
    fetch(form.action, {
      method: "POST",
      body: new FormData(form),
      credentials: "same-origin",
      headers: { "Accept": "application/json", "X-Requested-With": "fetch" }
    }).then(function (resp) {
      return resp.json().catch(function () { return null; }).then(function (body) {
        return { resp: resp, body: body };
      });
    }).then(function (r) {
      if (r.resp.ok && r.body && r.body.ok) {
        storeDel(storageKey);
        setStatus("Saved. Loading the next output\u2026", false);
        window.location.assign(r.body.next_url);
        return;
      }
      inFlight = false;
      submitButton.disabled = false;
      submitButton.removeAttribute("aria-busy");
      setStatus("Not saved.", true);
      showError(errorText(r.body, r.resp.status));
    }).catch(function () {
      // Network failure: the same submission id is sent again on retry, so a retry of a
      // request that did reach the server cannot create a second annotation.
      inFlight = false;
      submitButton.disabled = false;
      submitButton.removeAttribute("aria-busy");
      setStatus("Network problem: not confirmed. Press Enter to retry (a retry never saves twice).", true);
    });
  }
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    submit();
  });

  // ---- Heartbeat: keep the lease while the page is open. -------------------------------------
  function csrfToken() {
    var el = form.querySelector("input[name=csrfmiddlewaretoken]");
    return el ? el.value : "";
  }
  function heartbeat() {
    if (!heartbeatUrl || inFlight) { return; }
    fetch(heartbeatUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Accept": "application/json", "X-CSRFToken": csrfToken() }
    }).then(function (resp) {
      if (resp.status === 404 || resp.status === 409) {
        setStatus("Your hold on this output has ended; submitting may be refused. Reload for another one.", true);
      }
    }).catch(function () { /* a missed beat is retried next minute */ });
  }
  window.setInterval(heartbeat, 60 * 1000);

  // ---- Monospace toggle ----------------------------------------------------------------------
  function setMono(on) {
    if (subject) { subject.classList.toggle("mono", on); }
    if (monoToggle) { monoToggle.checked = on; }
    storeSet("reviewhub:mono", on ? "1" : "0");
  }
  if (monoToggle) {
    monoToggle.addEventListener("change", function () { setMono(monoToggle.checked); });
    if (storeGet("reviewhub:mono") === "1") { setMono(true); }
  }

  // ---- Context: a <details> (it opens and closes without script too); C toggles it. --------
  function toggleContext() {
    contextBox.open = !contextBox.open;
    // Opened from far down the page (a phone, the last criterion): bring it into view. Focus
    // stays on the current criterion, so the digits keep answering it.
    if (contextBox.open) {
      var summary = contextBox.querySelector("summary");
      if (summary) { summary.scrollIntoView({ block: "nearest" }); }
    }
  }

  // ---- Shortcut list -------------------------------------------------------------------------
  var helpReturnFocus = null;
  function toggleHelp(force) {
    if (!helpPanel) { return; }
    var show = typeof force === "boolean" ? force : helpPanel.hidden;
    helpPanel.hidden = !show;
    if (helpButton) { helpButton.setAttribute("aria-expanded", show ? "true" : "false"); }
    if (show) {
      helpReturnFocus = document.activeElement;
      helpPanel.focus();
    } else if (helpReturnFocus && helpReturnFocus.focus) {
      helpReturnFocus.focus();
    }
  }
  if (helpButton) { helpButton.addEventListener("click", function () { toggleHelp(); }); }
  var helpClose = document.getElementById("shortcuts-close");
  if (helpClose) { helpClose.addEventListener("click", function () { toggleHelp(false); }); }

  // ---- Keyboard ------------------------------------------------------------------------------
  function isTyping(el) {
    if (!el) { return false; }
    if (el.isContentEditable) { return true; }
    var tag = el.tagName;
    if (tag === "TEXTAREA" || tag === "SELECT") { return true; }
    if (tag === "INPUT") {
      var type = (el.getAttribute("type") || "text").toLowerCase();
      return ["radio", "checkbox", "button", "submit", "reset"].indexOf(type) < 0;
    }
    return false;
  }
  function pick(t, predicate) {
    var match = targetInputs(t).filter(predicate)[0];
    if (match) { choose(t, match); return true; }
    return false;
  }
  function pairwiseTarget() {
    var list = targets();
    var t = list[current];
    if (t && t.kind === "label" && t.crit.getAttribute("data-scale") === "pairwise") { return t; }
    for (var i = 0; i < list.length; i++) {
      if (list[i].kind === "label" && list[i].crit.getAttribute("data-scale") === "pairwise") {
        current = i;
        return list[i];
      }
    }
    return null;
  }

  document.addEventListener("keydown", function (ev) {
    var el = ev.target;
    if (ev.defaultPrevented) { return; }
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey) && form.contains(el)) {
      ev.preventDefault();
      submit();
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    if (ev.key === "Escape" && helpPanel && !helpPanel.hidden) {
      ev.preventDefault();
      toggleHelp(false);
      return;
    }
    if (isTyping(el)) { return; }
    var key = ev.key;
    var list = targets();
    var t = list[current];

    if (key === "Enter") {
      // Buttons, links and <summary> keep their own Enter; elsewhere Enter submits.
      var tag = el && el.tagName;
      if (tag === "BUTTON" || tag === "A" || tag === "SUMMARY") { return; }
      ev.preventDefault();
      submit();
      return;
    }
    if (/^[0-9]$/.test(key) && t) {
      var n = key === "0" ? "10" : key;
      if (pick(t, function (i) { return i.getAttribute("data-shortcut") === n; })) {
        ev.preventDefault();
      }
      return;
    }
    var lower = key.length === 1 ? key.toLowerCase() : key;
    if (lower === "a" || lower === "b" || lower === "t") {
      var pt = pairwiseTarget();
      if (pt) {
        ev.preventDefault();
        pick(pt, function (i) { return i.getAttribute("data-shortcut-letter") === lower; });
      }
      return;
    }
    if (lower === "j") { ev.preventDefault(); setCurrent(current + 1, true); return; }
    if (lower === "k") { ev.preventDefault(); setCurrent(current - 1, true); return; }
    if (lower === "s" && skipForm) {
      ev.preventDefault();
      if (!inFlight) { skipForm.requestSubmit ? skipForm.requestSubmit() : skipForm.submit(); }
      return;
    }
    if (lower === "m" && monoToggle) { ev.preventDefault(); setMono(!monoToggle.checked); return; }
    if (lower === "c" && contextBox) { ev.preventDefault(); toggleContext(); return; }
    if (lower === "r") {
      var rationale = form.querySelector("textarea[name=rationale]");
      if (rationale) { ev.preventDefault(); rationale.focus(); }
      return;
    }
    if (key === "?") { ev.preventDefault(); toggleHelp(); }
  });

  setCurrent(0, false);
})();
