// The selection report keeps its detailed tables in collapsed <details> sections whose ids are
// the anchors (#gates, #thresholds, ...). Chrome opens a closed section for a link to something
// inside it, but not for a link to the section itself: open it here, on load and on each
// followed link, then bring it into view.
(function () {
  "use strict";
  function reveal() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    if (!id) { return; }
    var target = document.getElementById(id);
    if (!target) { return; }
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
    target.scrollIntoView();
  }
  window.addEventListener("hashchange", reveal);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", reveal);
  } else {
    reveal();
  }
})();
