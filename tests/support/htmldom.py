"""A small DOM over the standard library's HTML parser, for tests that read a rendered page:
find elements by tag and class, read their text, and check the document is balanced (every end
tag closes the element open at that point, nothing left open)."""

from __future__ import annotations

from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None]) -> None:
        self.tag, self.attrs = tag, attrs
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return " ".join(" ".join(parts).split())

    def text_raw(self) -> str:
        """The text as written, whitespace kept (what a <pre> shows)."""
        return "".join(c if isinstance(c, str) else c.text_raw() for c in self.children)

    def walk(self) -> list[Node]:
        out: list[Node] = [self]
        for c in self.children:
            if isinstance(c, Node):
                out += c.walk()
        return out

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        return [n for n in self.walk()[1:]
                if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)]

    def find(self, tag: str | None = None, cls: str | None = None) -> Node:
        found = self.find_all(tag, cls)
        assert found, f"no <{tag or '*'} class={cls!r}>"
        return found[0]

    def by_id(self, ident: str) -> Node:
        found = [n for n in self.walk() if n.attrs.get("id") == ident]
        assert len(found) == 1, f"{len(found)} elements with id {ident!r}"
        return found[0]


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]
        self.mismatches: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, dict(attrs)))  # <rect/>, <line/> in SVG

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        top = self.stack.pop() if len(self.stack) > 1 else self.root
        if top.tag != tag:
            self.mismatches.append(f"</{tag}> closes <{top.tag}>")

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    """The document's root; fails when the markup is unbalanced."""
    tree = _Tree()
    tree.feed(html)
    tree.close()
    assert tree.mismatches == []
    assert [n.tag for n in tree.stack] == ["#root"], "elements left open"
    return tree.root


__all__ = ["Node", "parse"]
