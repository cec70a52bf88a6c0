"""docs/mechanisms.md documents every flag this package registers, and README.md and docs/ name
no flag that nobody registers (issue 20): the package's flags are read from its own parsers and
dataclasses, the flags of fairseq, SimulEval and the package's commands from theirs."""

import argparse
import dataclasses
import glob
import os
import re

import pytest
from fairseq import options
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterionConfig
from fairseq.tasks.translation import TranslationConfig

from fairseq_vision_attn import analysis, average, plots, prepare_data, report, seeds, toydata
from fairseq_vision_attn.criterions.flexible_attention_cross_entropy import (
    FlexibleAttentionCrossEntropyConfig,
)
from fairseq_vision_attn.criterions.latency_augmented_cross_entropy import LatencyAugmentedCrossEntropyConfig
from fairseq_vision_attn.models.lstm_attention import VisionAttnLSTMModel
from fairseq_vision_attn.tasks.translation_vision_attn import TranslationVisionAttnConfig

from .conftest import REPO

DOCS = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def _dataclass_flags(config, base):
    inherited = {field.name for field in dataclasses.fields(base)}
    return {"--" + f.name.replace("_", "-") for f in dataclasses.fields(config) if f.name not in inherited}


def _parser_flags(parser):
    flags = set()
    for action in parser._actions:
        flags.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _parser_flags(sub)
    return flags


def package_flags():
    """Every flag the plugin adds to fairseq's command lines."""
    model = argparse.ArgumentParser()
    VisionAttnLSTMModel.add_args(model)
    flags = _parser_flags(model)
    flags |= _dataclass_flags(FlexibleAttentionCrossEntropyConfig, LabelSmoothedCrossEntropyCriterionConfig)
    flags |= _dataclass_flags(LatencyAugmentedCrossEntropyConfig, LabelSmoothedCrossEntropyCriterionConfig)
    flags |= _dataclass_flags(TranslationVisionAttnConfig, TranslationConfig)
    return flags - {"--help"}


def known_flags():
    """Flags somebody registers: the package, fairseq's programs, the package's commands,
    sacrebleu, SimulEval and the agent, and the recipes' own options."""
    known = package_flags()
    argv = ["data-bin", "--user-dir", "fairseq_vision_attn", "--task", "translation_vision_attn"]
    for get_parser in (
        options.get_training_parser,
        options.get_generation_parser,
        options.get_interactive_generation_parser,
        options.get_preprocessing_parser,
    ):
        parser = get_parser()
        known |= _parser_flags(parser)
        if get_parser is not options.get_preprocessing_parser:
            for extra in (
                ["--arch", "lstm_memory", "--criterion", "latency_augmented_cross_entropy"],
                ["--arch", "lstm", "--lr-scheduler", "reduce_lr_on_plateau"],
                ["--arch", "transformer", "--scoring", "sacrebleu"],
            ):
                parser = get_parser()
                options.parse_args_and_arch(parser, [*argv, *extra], parse_known=True)
                known |= _parser_flags(parser)
    for module in (plots, analysis, average, prepare_data, report, seeds, toydata):
        known |= _parser_flags(module.get_parser())
    for script in glob.glob(os.path.join(REPO, "benchmarks", "*.py")):  # their parsers live in main()
        with open(script, encoding="utf-8") as handle:
            known |= set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", handle.read()))
    import sacrebleu.sacrebleu  # its parser is built inside parse_args(): read its source

    with open(sacrebleu.sacrebleu.__file__, encoding="utf-8") as handle:
        known |= set(re.findall(r"add_argument\(\s*'(--[a-z0-9-]+)'", handle.read()))
    try:
        from simuleval.options import general_parser

        from fairseq_vision_attn.agent import StreamingAgent

        simuleval = general_parser()
        StreamingAgent.add_args(simuleval)
        known |= _parser_flags(simuleval)
        known |= {
            "--source",
            "--target",
            "--output",
            "--agent-class",
            "--latency-metrics",
            "--no-use-ref-len",
        }
    except ImportError:
        pytest.skip("SimulEval is not installed: its flags cannot be checked")
    return known


def test_every_flag_of_the_package_is_in_mechanisms_md():
    with open(os.path.join(REPO, "docs", "mechanisms.md"), encoding="utf-8") as handle:
        documented = set(FLAG.findall(handle.read()))
    flags = package_flags()
    assert len(flags) > 30  # the model, criteria and task flags were found
    missing = sorted(flags - documented)
    assert not missing, f"flags registered by the package but not in docs/mechanisms.md: {missing}"


@pytest.mark.parametrize("path", DOCS, ids=[os.path.relpath(p, REPO) for p in DOCS])
def test_documents_name_only_registered_flags(path):
    known = known_flags()
    with open(path, encoding="utf-8") as handle:
        named = set(FLAG.findall(handle.read()))
    unknown = sorted(named - known)
    assert not unknown, f"{os.path.relpath(path, REPO)} names flags nobody registers: {unknown}"


@pytest.mark.parametrize("path", DOCS, ids=[os.path.relpath(p, REPO) for p in DOCS])
def test_no_prose_line_opens_with_a_quote_marker(path):
    """A wrapped line that opens with '>' (">= 39.49") turns the rest of its paragraph into a
    block quote; the docs hold no block quotes, so such a line is a wrapping mistake (code blocks,
    indented four spaces, are left alone)."""
    with open(path, encoding="utf-8") as handle:
        opened = [n for n, line in enumerate(handle, 1) if re.match(r" {0,3}>", line)]
    assert not opened, f"{os.path.relpath(path, REPO)}: lines {opened} open with '>'"
