"""Every command the README documents parses with the parser of the program it names (issue 21).

The commands are read from README.md (and docs/*.md, where present): its indented code blocks and
inline ``python -m fairseq_vision_attn...`` spans. Each is parsed, not run (a real run of each is
the job of the CLI tests and the recipes): fairseq's console scripts with fairseq's own option
parsing (``--user-dir`` loads this package, so its archs and flags are checked too), the
package's modules and the benchmark scripts with their own argparse parser, stopped right after
parsing. A documented command that names a flag that does not exist, misses a required one or
gives an invalid choice fails here. Placeholders: ``...`` is dropped (in a fairseq command it
stands for the flags of the command above: ``--user-dir`` and ``--task`` are added when absent),
and ``{a,b,c}`` stands for its first choice.
"""

import argparse
import glob
import importlib
import os
import re
import runpy
import shlex
import sys

import pytest
from fairseq import options

from .conftest import REPO

FAIRSEQ_PARSERS = {
    "fairseq-train": options.get_training_parser,
    "fairseq-generate": options.get_generation_parser,
    "fairseq-interactive": options.get_interactive_generation_parser,
}
OURS = ["--user-dir", "fairseq_vision_attn", "--task", "translation_vision_attn"]


def documents():
    return [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))


def _snippets(text):
    """Indented code blocks (continuation lines joined) and inline code spans."""
    blocks, current = [], ""
    for line in text.splitlines():
        if line.startswith("    ") and line.strip():
            current += line.strip()
            if current.endswith("\\"):
                current = current[:-1] + " "
            else:
                blocks.append(current)
                current = ""
    inline = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text, flags=re.S)]
    return blocks + [span for span in inline if span.startswith("python -m fairseq_vision_attn.")]


REDIRECTIONS = (">", ">>", "<", "2>", "2>>", "&>")


def _commands(snippet):
    for part in re.split(r"&&|;|\|", snippet.split("#")[0]):
        words = shlex.split(part)
        for i, word in enumerate(words):  # `cmd ... > out.txt`: the redirection is the shell's
            if word in REDIRECTIONS:
                words = words[:i]
                break
        if words:
            yield words


def documented_commands():
    found = []
    for path in documents():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        for snippet in _snippets(text):
            for words in _commands(snippet):
                program = words[0]
                checkable = (
                    program in FAIRSEQ_PARSERS
                    or words[:2] == ["bash", "recipes/prepare_data.sh"]
                    or (
                        program == "python"
                        and len(words) > 2
                        and (
                            words[1] == "-m"
                            and words[2].startswith("fairseq_vision_attn")
                            or words[1].endswith(".py")
                        )
                    )
                )
                if checkable:
                    found.append((os.path.basename(path), words))
    return found


COMMANDS = documented_commands()


def _placeholders(words):
    out = []
    for word in words:
        if word == "...":
            continue
        choices = re.fullmatch(r"\{([^},]+),[^}]*\}", word)
        out.append(choices.group(1) if choices else word)
    return out


class _Parsed(Exception):
    pass


def _parse_only(monkeypatch):
    """Make every argparse parser stop the program right after a successful parse."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)


def test_the_readme_documents_commands_of_every_kind():
    programs = {words[0] if words[0] != "python" else words[1] + " " + words[2] for _, words in COMMANDS}
    assert {"fairseq-train", "fairseq-generate"} <= programs
    assert any(p.startswith("-m fairseq_vision_attn.plots") for p in programs)
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("where,words", COMMANDS, ids=[" ".join(w)[:80] for _, w in COMMANDS])
def test_documented_command_parses(where, words, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    words = _placeholders(words)
    program, argv = words[0], words[1:]
    try:
        if program in FAIRSEQ_PARSERS:
            if "--user-dir" not in argv and any(w.startswith("--arch") for w in argv):
                argv = argv[:1] + OURS + argv[1:]  # "..." stood for the flags of the command above
            options.parse_args_and_arch(FAIRSEQ_PARSERS[program](), argv)
            return
        _parse_only(monkeypatch)
        if program == "bash":  # recipes/prepare_data.sh runs python -m fairseq_vision_attn.prepare_data
            argv = ["-m", "fairseq_vision_attn.prepare_data", *argv[1:]]
        if argv[0] == "-m":
            module = importlib.import_module(argv[1])
            monkeypatch.setattr(sys, "argv", [argv[1], *argv[2:]])
            with pytest.raises(_Parsed):
                module.main(argv[2:])
        else:
            script = os.path.join(REPO, argv[0])
            monkeypatch.setattr(sys, "argv", [script, *argv[1:]])
            monkeypatch.syspath_prepend(os.path.dirname(script))
            with pytest.raises(_Parsed):
                runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        err = capsys.readouterr().err.strip().splitlines()
        pytest.fail(f"{where}: `{' '.join(words)}` does not parse ({exit_.code}): {err[-1] if err else ''}")
