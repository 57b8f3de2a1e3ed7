"""What a page looks like at a given width, read in the browser's DOM (``support/cdp.py``).

``LAYOUT_PROBE`` returns, for the page as laid out:

- ``wide``: elements that reach past the window's left or right edge and are not inside a box
  that scrolls (``overflow-x: auto | scroll | hidden``) which itself fits the window: a table
  that runs off the page is listed, one that scrolls inside its box is not;
- ``clipped``: SVG ``text`` whose box leaves its own ``svg`` (an SVG clips what it draws
  outside itself: a label cut off);
- ``broken``: chips and tags (``.chips li``, ``.tag``, ``.outcome``, ``.divmark``) and what a
  page marks ``.whole`` (a run name, a number with its interval, a digest) whose text goes on
  to a new line in the middle of a word (a name or a number split; a break at a space is
  fine);
- ``columns``: for a side-by-side table (``table.sbs``), the left edge of each column in every
  row, so a test can hold the header over its cells; ``headTops``: the top of each part of the
  two column headers (arm, trial link, outcome), so a test can hold them level.
"""

from __future__ import annotations

#: the two widths the pages must read at: a small laptop window, a wide one
WIDTHS = (800, 1400)

LAYOUT_PROBE = """(() => {
  const W = document.documentElement.clientWidth;
  const scrolls = p => { const s = getComputedStyle(p);
    return ['auto', 'scroll', 'hidden'].includes(s.overflowX); };
  const inBox = e => {
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      if (scrolls(p)) { const r = p.getBoundingClientRect();
                        return r.right <= W + 0.5 && r.left >= -0.5; } }
    return false; };
  const cls = e => typeof e.className === 'string' && e.className
    ? '.' + e.className.trim().split(/\\s+/).join('.') : '';
  const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + cls(e);
  const wide = [];
  for (const e of document.body.querySelectorAll('*')) {
    if (e.closest('svg') && e.tagName.toLowerCase() !== 'svg') continue;
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if ((r.right > W + 0.5 || r.left < -0.5) && !inBox(e))
      wide.push(name(e) + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
  }
  const clipped = [];
  for (const t of document.querySelectorAll('svg text')) {
    const s = t.ownerSVGElement.getBoundingClientRect(), r = t.getBoundingClientRect();
    if (r.width && (r.left < s.left - 0.5 || r.right > s.right + 0.5 ||
                    r.top < s.top - 0.5 || r.bottom > s.bottom + 0.5))
      clipped.push(t.textContent.trim().slice(0, 60));
  }
  const broken = [];
  for (const e of document.querySelectorAll('.chips li, .tag, .outcome, .divmark, .whole')) {
    const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
    let prevTop = null, prevChar = ' ';
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (let i = 0; i < n.data.length; i++) {
        const range = document.createRange(); range.setStart(n, i); range.setEnd(n, i + 1);
        const r = range.getClientRects()[0], ch = n.data[i];
        if (!r) continue;
        const top = Math.round(r.top);
        if (prevTop !== null && top > prevTop + 2 && !/\\s/.test(prevChar) && !/\\s/.test(ch)) {
          broken.push(e.textContent.trim().slice(0, 60)); prevTop = null; break; }
        prevTop = top; prevChar = ch;
      }
    }
  }
  const columns = [...document.querySelectorAll('table.sbs tr')].map(
    tr => [...tr.children].map(c => Math.round(c.getBoundingClientRect().left)));
  const headTops = [...document.querySelectorAll('table.sbs th.side')].map(
    th => [...th.children].map(c => Math.round(c.getBoundingClientRect().top)));
  return {W, scrollWidth: document.documentElement.scrollWidth, wide: wide.slice(0, 20),
          clipped: clipped.slice(0, 20), broken: broken.slice(0, 20), columns, headTops,
          svgTexts: document.querySelectorAll('svg text').length,
          body: document.body.textContent.replace(/\\s+/g, ' ')};
})()"""


def assert_reads(probe: dict, where: str) -> None:
    """The layout checks every page passes at every width; ``where`` names page and width."""
    assert probe["scrollWidth"] <= probe["W"], (where, "wider than the window", probe["wide"])
    assert probe["wide"] == [], (where, "past the window's edge", probe["wide"])
    assert probe["clipped"] == [], (where, "SVG text cut off", probe["clipped"])
    assert probe["broken"] == [], (where, "a chip broken over lines", probe["broken"])
