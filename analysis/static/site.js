/* qashift site: sortable tables and metric tabs. No dependencies; the pages read fine
 * without it (every table is already in a useful order, every panel is shown).
 *
 * Sorting: a column header holding <button class="sort"> sorts its table; the th carries
 * aria-sort. Buttons take Enter and Space like any button. Cells sort by data-sort when
 * present (full-precision numbers), else by their text; empty values always go last.
 * Tabs: the WAI-ARIA tabs pattern (arrow keys, Home, End); #em / #f1 in the URL picks one. */
(function () {
  "use strict";

  function cellKey(row, index) {
    var cell = row.cells[index];
    if (!cell) return "";
    var key = cell.getAttribute("data-sort");
    return key === null ? cell.textContent.trim() : key;
  }

  function sortTable(table, th) {
    var index = Array.prototype.indexOf.call(th.parentNode.cells, th);
    var current = th.getAttribute("aria-sort");
    var order = current === "ascending" ? "descending"
      : current === "descending" ? "ascending" : (th.getAttribute("data-first") || "ascending");
    var numeric = th.getAttribute("data-type") === "number";
    var sign = order === "ascending" ? 1 : -1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).map(function (row, i) {
      return { row: row, key: cellKey(row, index), i: i };
    });
    rows.sort(function (a, b) {
      var ea = a.key === "", eb = b.key === "";
      if (ea || eb) return ea === eb ? a.i - b.i : (ea ? 1 : -1);
      var d = numeric ? parseFloat(a.key) - parseFloat(b.key)
        : a.key.localeCompare(b.key, "en", { sensitivity: "base", numeric: true });
      return d !== 0 ? sign * d : a.i - b.i;
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
    Array.prototype.forEach.call(th.parentNode.cells, function (other) {
      if (other !== th) other.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", order);
    var status = table.querySelector(".sort-status");
    if (status) status.textContent = "Sorted by " + th.textContent.trim() + ", " + order + ".";
  }

  function initTable(table) {
    var status = document.createElement("span");
    status.className = "sort-status visually-hidden";
    status.setAttribute("aria-live", "polite");
    if (table.caption) table.caption.appendChild(status);
    Array.prototype.forEach.call(table.querySelectorAll("thead th button.sort"), function (b) {
      b.addEventListener("click", function () { sortTable(table, b.parentNode); });
    });
  }

  function initTabs(list) {
    var tabs = Array.prototype.slice.call(list.querySelectorAll("[role=tab]"));
    function panel(tab) { return document.getElementById(tab.getAttribute("aria-controls")); }
    function select(tab, focus) {
      tabs.forEach(function (t) {
        var on = t === tab;
        t.setAttribute("aria-selected", on ? "true" : "false");
        t.tabIndex = on ? 0 : -1;
        panel(t).hidden = !on;
      });
      if (focus) tab.focus();
    }
    tabs.forEach(function (tab, i) {
      tab.addEventListener("click", function () {
        select(tab, false);
        if (history.replaceState) history.replaceState(null, "", "#" + tab.id.slice(4));
      });
      tab.addEventListener("keydown", function (e) {
        var next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
        if (next === undefined) return;
        e.preventDefault();
        select(tabs[(next + tabs.length) % tabs.length], true);
      });
    });
    var wanted = document.getElementById("tab-" + location.hash.slice(1));
    list.hidden = false;
    select(tabs.indexOf(wanted) >= 0 ? wanted : tabs[0], false);
    Array.prototype.forEach.call(document.querySelectorAll("[role=tabpanel] > h2"), function (h) {
      h.className = "visually-hidden";
    });
  }

  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), initTable);
    Array.prototype.forEach.call(document.querySelectorAll("[role=tablist]"), initTabs);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
