"""Edits the project's YAML files in place, keeping their comments, quotes and layout (scaffold
and init write through it)."""

from __future__ import annotations

import re
from pathlib import Path


def round_trip_yaml():
    """A YAML reader and writer that keeps a file's comments, quotes, flow style and indentation
    (the project's files round-trip unchanged: tests/pipeline/test_project.py)."""
    from ruamel.yaml import YAML

    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 4096
    rt.indent(mapping=2, sequence=4, offset=2)
    rt.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return rt


def edit_yaml(path: Path, edit) -> bool:
    """Applies `edit` to the YAML document of `path` in place (comments and layout kept); a blank
    line that separated two top-level sections stays even when what preceded it went. Returns
    whether `edit` changed anything (edit returns that)."""
    import io

    rt = round_trip_yaml()
    text = path.read_text()
    document = rt.load(text)
    if not edit(document):
        return False
    out = io.StringIO()
    rt.dump(document, out)
    lines = out.getvalue().splitlines(keepends=True)
    gaps = {line for before, line in zip(text.splitlines(keepends=True), text.splitlines(keepends=True)[1:])
            if not before.strip() and re.match(r"^[^\s#]", line)}
    for i in range(len(lines) - 1, 0, -1):
        if lines[i] in gaps and lines[i - 1].strip():
            lines.insert(i, "\n")
    path.write_text("".join(lines))
    return True


def _tail(node):
    """The innermost last block collection of `node`: where ruamel keeps the comment lines that
    follow the node, i.e. those before the next key (its `ca.end`)."""
    while True:
        last = (list(node.values()) if isinstance(node, dict) else list(node))[-1:] if len(node) else []
        if not last or not isinstance(last[0], (dict, list)) or not len(last[0]) or last[0].fa.flow_style():
            return node
        node = last[0]


def take_following_comments(node) -> list:
    """Takes the comment lines that follow `node` (see _tail) off it."""
    tail = _tail(node)
    tokens, tail.ca.end = list(tail.ca.end or []), []
    return tokens


def give_following_comments(node, tokens: list) -> None:
    tail = _tail(node)
    if tokens and tail.ca.comment is None:
        tail.ca.comment = [None, None]  # ruamel writes a collection's end comments only beside its own
    tail.ca.end = [*(tail.ca.end or []), *tokens]


def _delete_key(mapping, key: str) -> None:
    """Deletes a key of a block mapping with the comment lines that belong to it (those before it,
    which ruamel keeps on the previous key's node); the comment lines before the next key stay."""
    keys = list(mapping)
    i = keys.index(key)
    following = take_following_comments(mapping[key]) if isinstance(mapping[key], (dict, list)) and len(mapping[key]) else []
    if i > 0 and isinstance(mapping[keys[i - 1]], (dict, list)) and len(mapping[keys[i - 1]]):
        take_following_comments(mapping[keys[i - 1]])  # the deleted key's own comment lines
        give_following_comments(mapping[keys[i - 1]], following)
    elif i == 0:  # the comment lines before the first key are the deleted key's; the next key's follow it
        mapping.ca.comment = [None, following] if following and len(keys) > 1 else None
    del mapping[key]
