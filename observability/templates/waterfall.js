// eppkit's waterfall pages. The waterfall itself is plain HTML and SVG and reads without this script;
// the script adds folding a span's children away (▾), "open all" / "close all" per trace, and links to
// one span: #span=<span id> opens that span's details and scrolls to it.
(function () {
  "use strict";

  function spansOf(node) {
    return Array.prototype.slice.call(node.querySelectorAll("details.span"));
  }

  function fold(span) {
    var folded = span.classList.toggle("folded");
    var prefix = span.dataset.path + "/";
    spansOf(span.closest(".waterfall")).forEach(function (other) {
      if (other.dataset.path.indexOf(prefix) !== 0) return;
      // Unfolding shows a child again unless one of its own ancestors stays folded.
      other.hidden = folded || spansOf(span.closest(".waterfall")).some(function (a) {
        return a !== span && a.classList.contains("folded") && other.dataset.path.indexOf(a.dataset.path + "/") === 0;
      });
    });
  }

  function select(id) {
    var span = document.querySelector('details.span[data-span-id="' + id + '"]');
    if (!span) return;
    spansOf(document).forEach(function (s) { s.classList.remove("selected"); });
    spansOf(span.closest(".waterfall")).forEach(function (other) {
      if (span.dataset.path.indexOf(other.dataset.path + "/") === 0 && other.classList.contains("folded")) fold(other);
    });
    span.classList.add("selected");
    if (!span.open) span.querySelector("summary").click();  // the same path as a reader's click
    var box = span.getBoundingClientRect();
    if (box.top < 0 || box.bottom > window.innerHeight) span.scrollIntoView({ block: "center" });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action]");
    if (!button) return;
    var action = button.dataset.action;
    if (action === "fold") {
      event.preventDefault();  // inside the row's <summary>: fold, do not open the details
      fold(button.closest("details.span"));
    } else if (action === "open-all" || action === "close-all") {
      spansOf(button.closest("section.trace")).forEach(function (s) { if (!s.hidden) s.open = action === "open-all"; });
    }
  });

  function fromHash() {
    var match = /span=([0-9a-fA-F]+)/.exec(window.location.hash);
    if (match) select(match[1].toLowerCase());
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
  document.documentElement.dataset.ready = "true";
})();
