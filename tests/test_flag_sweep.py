"""Every flag this package adds, swept with invalid values (issue 8, part 4).

The table is built from the parsers themselves, so a new flag is swept without editing this file:
each model flag gets the invalid values of its validator (non-positive, NaN, inf, wrong type,
unknown choice), and each mechanism-only flag is also tried on an arch whose attention does not
read it. Every case goes through fairseq's own option parsing and the model's checks in process
(fast, exhaustive), and one case per kind of check goes through the real ``fairseq-train``
command line: non-zero exit, a one-line message naming the flag, no traceback, no checkpoint.
"""

import argparse
import concurrent.futures

import pytest
from fairseq import options
from fairseq.models import ARCH_CONFIG_REGISTRY

from fairseq_vision_attn import errors
from fairseq_vision_attn.models.lstm_attention import (
    MECHANISM_FLAGS,
    TEMPERATURE_FLAGS,
    VisionAttnLSTMModel,
    refuse_ignored_flags,
    validate_args,
)

from .conftest import REPO, FakeTask, make_dictionary, run_cli
from .test_cli import train_args

INVALID = {
    errors.positive_int: ["0", "-2", "1.5", "many"],
    errors.positive_float: ["0", "-1", "nan", "inf", "wide"],
    errors.non_negative_float: ["-1", "nan", "inf", "some"],
    errors.probability: ["-0.1", "1", "nan", "half"],
    errors.greater_than_one: ["1", "0.5", "nan", "inf", "big"],
    errors.finite_float: ["nan", "inf", "low"],
    errors.str2bool: ["maybe", "2"],
}

# an arch whose attention reads the flag (so only the value is wrong)
OWNER_ARCH = {
    "local": "lstm_local",
    "flexible": "lstm_flexible",
    "memory": "lstm_memory",
    "monotonic": "lstm_monotonic",
    "mocha": "lstm_mocha",
    "milk": "lstm_milk",
    "waitk": "lstm_waitk",
}
# a valid value other than the default, for the wrong-arch cases (None: a default that depends
# on another flag, e.g. --monotonic-energy-scale-init's)
OTHER_VALUE = {bool: "true", int: "5", float: "2.5", str: None, type(None): "2.5"}


def model_actions():
    parser = argparse.ArgumentParser()
    VisionAttnLSTMModel.add_args(parser)
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def arch_for(dest):
    owners = MECHANISM_FLAGS.get(dest, ((None,), None))[0]
    return OWNER_ARCH.get(owners[0], "lstm_sact" if dest in TEMPERATURE_FLAGS else "lstm_global")


def value_cases():
    cases = []
    for action in model_actions():
        flag = action.option_strings[0]
        if action.choices is not None:
            values = ["bogus"]
        else:
            values = INVALID.get(action.type, [])
        for value in values:
            cases.append((arch_for(action.dest), [flag, value], flag))
    return cases


def foreign_cases():
    """Each mechanism-only flag, with a valid value, on an arch that does not read it."""
    cases = []
    for dest, (owners, default) in {**MECHANISM_FLAGS, **TEMPERATURE_FLAGS}.items():
        flag = "--" + dest.replace("_", "-")
        if isinstance(default, str):
            action = next(a for a in model_actions() if a.dest == dest)
            value = next(c for c in action.choices if c != default)
        else:
            value = OTHER_VALUE[type(default)]
        arch = "lstm_global" if "additive" not in owners else "lstm_noattn"
        cases.append((arch, [flag, value], flag))
    return cases


VALUE_CASES = value_cases()
FOREIGN_CASES = foreign_cases()
ALL_CASES = VALUE_CASES + FOREIGN_CASES


def test_every_model_flag_is_swept():
    """No flag escapes the sweep: each has a validator with invalid values, choices, or is a
    plain switch / path checked elsewhere."""
    unswept = [
        a.option_strings[0]
        for a in model_actions()
        if a.choices is None and a.type not in INVALID and a.nargs != 0
    ]
    assert set(unswept) == {"--encoder-embed-path", "--decoder-embed-path"}, unswept
    assert len(VALUE_CASES) > 60 and len(FOREIGN_CASES) == len(MECHANISM_FLAGS) + len(TEMPERATURE_FLAGS)


@pytest.mark.parametrize("arch,flags,named", ALL_CASES, ids=[f"{a}:{f[0]}={f[1]}" for a, f, _ in ALL_CASES])
def test_parsing_and_model_checks_refuse(arch, flags, named, capsys):
    """fairseq's own argument parsing (what fairseq-train runs) plus the checks the model and
    the task run on a model built from the command line."""
    parser = options.get_training_parser()
    argv = ["data-bin", "--user-dir", "fairseq_vision_attn", "--task", "translation_vision_attn"]
    argv += ["--arch", arch, *flags]
    with pytest.raises((SystemExit, errors.VisionAttnError)) as caught:
        args = options.parse_args_and_arch(parser, argv)
        ARCH_CONFIG_REGISTRY[arch](args)
        validate_args(args)
        refuse_ignored_flags(args)
    if caught.type is SystemExit:
        assert caught.value.code == 2
        message = capsys.readouterr().err.strip().splitlines()[-1]
    else:
        message = str(caught.value)
        assert "\n" not in message
    assert named in message, message


def cli_representatives():
    """For the real command line: one case per kind of check (each validator, a choice, two
    wrong-arch flags); the in-process sweep above covers every flag and value."""
    kinds = {a.option_strings[0]: a.type if a.choices is None else "choice" for a in model_actions()}
    chosen, seen = [], set()
    for arch, flags, named in VALUE_CASES:
        if kinds[flags[0]] not in seen:
            seen.add(kinds[flags[0]])
            chosen.append((arch, flags, named))
    return chosen + FOREIGN_CASES[:: len(FOREIGN_CASES) // 2]


def test_real_cli_refuses_each_flag_in_one_line(toy_data_bin, tmp_path):
    cases = cli_representatives()

    def run(i, case):
        arch, flags, _ = case
        return run_cli(train_args(toy_data_bin, tmp_path / str(i), arch, *flags), cwd=REPO, check=False)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(run, range(len(cases)), cases))
    failures = []
    for (arch, flags, named), proc in zip(cases, procs):
        lines = [line for line in proc.stderr.splitlines() if "error:" in line]
        ok = proc.returncode != 0 and "Traceback" not in proc.stderr and lines and named in lines[-1]
        if not ok:
            failures.append(f"{arch} {' '.join(flags)}: rc {proc.returncode}\n{proc.stderr[-800:]}")
    assert not failures, "\n\n".join(failures)
    assert not any((tmp_path / str(i) / "checkpoint_last.pt").exists() for i in range(len(cases)))


@pytest.mark.parametrize("bias", ["0", "-3.5"])
def test_flex_strength_bias_sets_b_g(bias):
    """--flex-strength-bias is a real flag (fairseq's parser accepts it) and sets b_g of Eq. 8."""
    parser = options.get_training_parser()
    argv = ["data-bin", "--user-dir", "fairseq_vision_attn", "--task", "translation_vision_attn"]
    args = options.parse_args_and_arch(
        parser, argv + ["--arch", "lstm_flexible", "--flex-strength-bias", bias]
    )
    ARCH_CONFIG_REGISTRY["lstm_flexible"](args)
    refuse_ignored_flags(args)
    dictionary = make_dictionary()
    model = VisionAttnLSTMModel.build_model(args, FakeTask(dictionary, dictionary))
    assert float(model.decoder.attention.strength_v.bias) == float(bias)
