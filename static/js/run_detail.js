// Live progress and cancel/resume on the judge run page (templates/judges/run_detail.html).
// A file, not an inline script, so that the page runs under the site's script-src 'self'.
(function () {
  "use strict";
  var root = document.getElementById("run");
  var csrf = document.querySelector("#run-actions input[name=csrfmiddlewaretoken]").value;
  function text(id, value) { document.getElementById(id).textContent = (value === null || value === undefined) ? "—" : String(value); }
  function eta(seconds) {
    if (seconds === null || seconds === undefined) { return "—"; }
    if (seconds < 90) { return Math.round(seconds) + " s"; }
    return Math.round(seconds / 60) + " min";
  }
  function el(tag, cls, value) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (value !== undefined) { node.textContent = String(value); }
    return node;
  }
  var titles = {failed: "This run failed", partly_failed: "This run partly failed"};
  function showOutcome(o) {
    if (!o) { return; }
    var status = document.getElementById("p-status");
    status.textContent = o.label; status.className = "run-state run-state-" + o.state;
    status.dataset.state = o.state;
    document.getElementById("p-bar").classList.toggle("run-failed", o.has_failures);
    var box = document.getElementById("run-failures");
    box.hidden = !o.has_failures;
    if (!o.has_failures) { return; }
    text("f-title", titles[o.state] || "Some jobs failed"); text("f-summary", o.headline);
    var kinds = document.getElementById("f-kinds");
    kinds.replaceChildren();
    o.kinds.forEach(function (k) {
      var li = el("li", "", k.label + ": "); li.appendChild(el("span", "f-count", k.count));
      kinds.appendChild(li);
    });
    var first = document.getElementById("f-first");
    first.replaceChildren();
    (o.first_errors || []).forEach(function (e) {
      var li = el("li");
      li.appendChild(el("span", "muted", "job " + e.job + " · " + e.criterion + " · " + e.kind_label +
        (e.http_status ? " · HTTP " + e.http_status : "") + ":"));
      li.appendChild(document.createTextNode(" ")); li.appendChild(el("code", "", e.error));
      first.appendChild(li);
    });
  }
  function show(p) {
    text("p-stop", p.stop_reason);
    var j = p.jobs;
    ["total", "queued", "running", "done", "failed", "unparseable", "cancelled", "retrying"].forEach(function (k) { text("p-" + k, j[k]); });
    text("p-calls", p.calls_made); text("p-tin", p.tokens_in); text("p-tout", p.tokens_out);
    text("p-cost", p.cost); text("p-rate", p.calls_per_minute); text("p-eta", eta(p.eta_seconds));
    text("p-verdicts", p.verdicts); text("p-verdicts-unscored", p.verdicts_unscored);
    document.getElementById("p-bar").value = p.fraction_done;
    text("p-updated", new Date().toLocaleTimeString());
    var active = p.status === "running" || p.status === "pending";
    document.getElementById("btn-cancel").disabled = !active;
    document.getElementById("btn-resume").disabled = active;
    return active;
  }
  var timer = null;
  function poll() {
    fetch(root.dataset.progressUrl, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (data) { text("p-error", ""); showOutcome(data.outcome); var active = show(data.progress); timer = setTimeout(poll, active ? 2000 : 10000); })
      .catch(function (e) { text("p-error", "Could not refresh: " + e.message); timer = setTimeout(poll, 5000); });
  }
  function act(url) {
    fetch(url, {method: "POST", credentials: "same-origin", headers: {"X-CSRFToken": csrf, "Content-Type": "application/json"}, body: "{}"})
      .then(function (r) { return r.json().then(function (d) { return {ok: r.ok, d: d}; }); })
      .then(function (res) {
        if (!res.ok) { text("p-error", res.d.error ? res.d.error.message : "failed"); return; }
        text("p-error", ""); showOutcome(res.d.outcome); show(res.d.progress); clearTimeout(timer); timer = setTimeout(poll, 1000);
      })
      .catch(function (e) { text("p-error", e.message); });
  }
  document.getElementById("btn-cancel").addEventListener("click", function () { act(root.dataset.cancelUrl); });
  document.getElementById("btn-resume").addEventListener("click", function () { act(root.dataset.resumeUrl); });
  poll();
})();
