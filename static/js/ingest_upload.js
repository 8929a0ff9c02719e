// Upload with progress on the data page (templates/studies/data.html): the file goes, as it is,
// to the REST bulk endpoint (the same code path as any API client), and the outcome or the
// rejected rows are shown as text. Without this script the form posts to the page itself.
(function () {
  "use strict";
  var form = document.getElementById("ingest-form");
  if (!form || !window.XMLHttpRequest) { return; }
  var urls = JSON.parse(form.dataset.urls);
  var bar = document.getElementById("ingest-progress");
  var status = document.getElementById("ingest-status");
  var outcome = document.getElementById("ingest-outcome");
  var csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  var types = {jsonl: "application/x-ndjson", ndjson: "application/x-ndjson",
               json: "application/json", csv: "text/csv"};
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function count(n) { return Number(n).toLocaleString("en"); }
  function showResult(kind, r) {
    var p = el("p", "message message-success",
      kind.charAt(0).toUpperCase() + kind.slice(1) + ": " + r.created + " created, " +
      r.updated + " updated, " + r.unchanged + " unchanged.");
    p.id = "ingest-result";
    outcome.replaceChildren(p);
    refreshListing();
  }
  // The counts and candidate cards below the form are the server's rendering of the page:
  // after an upload wrote rows, they are fetched again and swapped in, so that "60 created"
  // is never shown above "0 outputs".
  function refreshListing() {
    var listing = document.getElementById("data-listing");
    if (!listing || !window.fetch || !window.DOMParser) { return; }
    fetch(window.location.pathname, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("data-listing");
        if (fresh) { listing.replaceChildren.apply(listing, Array.prototype.slice.call(fresh.childNodes)); }
      })
      .catch(function () {
        var note = el("p", "muted small", "The counts below were not refreshed: reload the page to see them.");
        note.id = "listing-stale";
        outcome.appendChild(note);
      });
  }
  function showError(error) {
    var box = el("div", "form-error");
    box.id = "ingest-errors";
    box.setAttribute("role", "alert");
    box.appendChild(el("p", "", error.message || "The upload failed."));
    var rows = (error.details && error.details.errors) || [];
    var list = el("ul");
    // Each problem is {path, message} plus, for a row of the file, its line (docs/api.md).
    rows.forEach(function (e) {
      var li = el("li");
      var where = e.line ? "line " + e.line : "";
      if (e.line && e.index !== undefined && e.index !== null) { where += " (element [" + e.index + "])"; }
      li.appendChild(document.createTextNode(where + (where && e.path ? ", " : "")));
      if (e.path) { li.appendChild(el("strong", "", e.path)); }
      li.appendChild(document.createTextNode((where || e.path ? ": " : "") + (e.message || "")));
      list.appendChild(li);
    });
    if (rows.length) { box.appendChild(list); }
    if (error.details && error.details.more_errors) {
      box.appendChild(el("p", "small", "… and " + error.details.more_errors + " more."));
    }
    outcome.replaceChildren(box);
  }
  form.addEventListener("submit", function (event) {
    var file = document.getElementById("ingest-file").files[0];
    var kind = document.getElementById("ingest-kind").value;
    var ext = file ? file.name.split(".").pop().toLowerCase() : "";
    if (!file || !types[ext] || !urls[kind]) { return; }  // the server names the problem
    event.preventDefault();
    var xhr = new XMLHttpRequest();
    // ?progress=ndjson: the server streams what it is doing (validating, then writing), then
    // the answer a plain request gets, one JSON object a line (docs/ingest.md).
    xhr.open("POST", urls[kind] + "?progress=ndjson");
    xhr.setRequestHeader("Content-Type", types[ext]);
    xhr.setRequestHeader("X-CSRFToken", csrf);
    xhr.setRequestHeader("Accept", "application/json");
    outcome.replaceChildren();  // the last upload's outcome is not this one's
    bar.hidden = false; bar.value = 0;
    status.textContent = "Uploading…";
    xhr.upload.onprogress = function (e) {
      if (e.lengthComputable) {
        bar.value = e.loaded / e.total;
        status.textContent = "Uploading " + Math.round(100 * e.loaded / e.total) + " %";
      }
    };
    xhr.upload.onload = function () { status.textContent = "Checking and writing the rows…"; };
    var seen = 0, last = null;
    function events() {
      // Every complete line that arrived since the last call.
      var text = xhr.responseText, end = text.lastIndexOf("\n");
      if (end < seen) { return; }
      text.slice(seen, end).split("\n").forEach(function (line) {
        if (!line) { return; }
        var ev = null;
        try { ev = JSON.parse(line); } catch (err) { ev = null; }
        if (!ev) { return; }
        last = ev;
        if (ev.phase) {
          var what = ev.phase === "validating" ? "Checking" : "Writing";
          var rows = typeof ev.rows === "number" ? ev.rows : ev.done;
          bar.hidden = false;
          if (ev.total) {
            bar.value = Math.min(1, ev.done / ev.total);
            // Checking: rows read so far and how much of the file (its row count is not
            // known before the end); writing: rows written of all of them.
            status.textContent = what + " the rows: " + (ev.unit === "bytes"
              ? count(rows) + " read, " + Math.round(100 * ev.done / ev.total) + " % of the file"
              : count(rows) + " of " + count(ev.total) + " written") + "…";
          } else {
            status.textContent = what + " the rows…";
          }
        }
      });
      seen = end + 1;
    }
    xhr.onprogress = events;
    xhr.onload = function () {
      bar.hidden = true;
      status.textContent = "";
      var streamed = (xhr.getResponseHeader("Content-Type") || "").indexOf("ndjson") >= 0;
      var body = null;
      if (streamed) { events(); body = last; } else {
        try { body = JSON.parse(xhr.responseText); } catch (err) { body = null; }
        if (xhr.status === 200 && body) { body = {result: body}; }
      }
      if (body && body.result) { showResult(kind, body.result); return; }
      showError((body && body.error) || {message: "The server answered " + xhr.status + "."});
    };
    xhr.onerror = function () { bar.hidden = true; status.textContent = ""; showError({message: "The upload did not reach the server."}); };
    xhr.send(file);
  });
}());
