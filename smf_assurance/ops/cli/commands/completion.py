"""``completion bash|zsh|fish``: shell completion read from the parser itself.

The script is generated from the argparse
tree at the moment it is asked for, so a new command or option completes
without anyone editing a script, and no completion library is needed.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from smf_assurance.ops.cli.output import say
from smf_assurance.ops.cli.parsers.completion import PROG

FUNCTION = "_smf_assurance"


@dataclass(frozen=True)
class Node:
    """One command of the tree: its words, its subcommands (with their
    summaries) and its options."""

    path: tuple[str, ...]
    children: tuple[tuple[str, str], ...]
    options: tuple[tuple[str, str], ...]


def tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Node]:
    children: list[tuple[str, str]] = []
    options: list[tuple[str, str]] = []
    nested: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {c.dest: c.help or "" for c in action._choices_actions}
            for name, child in action.choices.items():
                children.append((name, summaries.get(name, "")))
                nested.append((name, child))
        else:
            for flag in action.option_strings:
                options.append((flag, action.help or ""))
    yield Node(path, tuple(children), tuple(options))
    for name, child in nested:
        yield from tree(child, (*path, name))


def bash_script(nodes: list[Node]) -> str:
    steps = [
        f'      {shlex.quote(" ".join(n.path) + "|" + name)}) path="${{path:+$path }}{name}" ;;'
        for n in nodes
        for name, _ in n.children
    ]
    words = [
        f"    {shlex.quote(' '.join(n.path))}) "
        f"words={shlex.quote(' '.join([c for c, _ in n.children] + [o for o, _ in n.options]))} ;;"
        for n in nodes
    ]
    return "\n".join(
        [
            f"# {PROG} completion for bash, generated from its parser",
            f"{FUNCTION}() {{",
            "  local cur path word words i",
            '  cur="${COMP_WORDS[COMP_CWORD]}"',
            '  path=""',
            "  for ((i = 1; i < COMP_CWORD; i++)); do",
            '    word="${COMP_WORDS[i]}"',
            '    case "$path|$word" in',
            *steps,
            "    esac",
            "  done",
            '  words=""',
            '  case "$path" in',
            *words,
            "  esac",
            '  COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            "}",
            f"complete -o default -F {FUNCTION} {PROG}",
            "",
        ]
    )


def zsh_script(nodes: list[Node]) -> str:
    return "\n".join(
        [
            f"#compdef {PROG}",
            "# zsh runs the bash completion through bashcompinit",
            "autoload -U +X bashcompinit && bashcompinit",
            bash_script(nodes),
        ]
    )


def _fish_condition(node: Node) -> str:
    if not node.path:
        return "__fish_use_subcommand"
    seen = "; and ".join(f"__fish_seen_subcommand_from {word}" for word in node.path)
    if node.children:
        names = " ".join(name for name, _ in node.children)
        return f"{seen}; and not __fish_seen_subcommand_from {names}"
    return seen


def fish_script(nodes: list[Node]) -> str:
    lines = [f"# {PROG} completion for fish, generated from its parser"]
    for node in nodes:
        condition = shlex.quote(_fish_condition(node))
        for name, summary in node.children:
            word, text = shlex.quote(name), shlex.quote(summary)
            lines.append(f"complete -c {PROG} -n {condition} -a {word} -d {text}")
        for flag, summary in node.options:
            kind = "-l" if flag.startswith("--") else "-s"
            lines.append(
                f"complete -c {PROG} -n {condition} {kind} {flag.lstrip('-')} "
                f"-d {shlex.quote(summary)}"
            )
    return "\n".join(lines) + "\n"


def run_completion(args: argparse.Namespace) -> int:
    nodes = list(tree(args.parser))
    script = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[args.shell](nodes)
    say(script.rstrip("\n"))
    return 0
