"""A SimulEval (1.1.4) text-to-text agent for this package's streaming checkpoints.

    pip install -e .[simuleval]
    simuleval --agent-class fairseq_vision_attn.agent.StreamingAgent \\
        --checkpoint ckpt/checkpoint_best.pt --data-bin data-bin \\
        --source test.src --target test.tgt --output simuleval_out [--test-waitk-lagging K] \\
        [--monotonic-stop RULE]

SimulEval sends the source one unit at a time: the whitespace-separated tokens of each line of
``--source``, which must be tokenized (and BPE-split) as the model's source dictionary expects.
Each WRITE is one target token of the model's dictionary, so latency is measured in model
tokens (for BPE data, add ``--eval-latency-unit spm`` only if the tokens are sentencepiece).

**Policy.** At every call the agent runs the model on what it has read so far: the encoder on
the source prefix (plus the source EOS once SimulEval says the source is finished) and the
decoder, teacher-forced, on the target written so far, then one more step. If that step's
policy wants a source token not read yet (the monotonic head would move past the last token
read; wait-k's schedule is ahead of the source), the agent READs; otherwise it WRITEs the
argmax token (EOS finishes the sentence). Re-running the prefix gives the same heads as
before, because the streaming archs never look past what they had read
(``tests/test_simultaneous.py``), so this is the generator's greedy policy, step for step.

**Latency units.** SimulEval counts source words read and records no delay for the end of the
sentence; :class:`..simultaneous.SimultaneousGenerator` counts the source EOS as a token and
records a delay for the target EOS. The same decisions therefore give SimulEval delays equal to
the generator's delays without the EOS step, capped at |x| - 1, on a source of |x| - 1 units
(:func:`simuleval_delays`); on those, SimulEval's AL/AP/DAL equal :mod:`..latency`'s (tested).
"""

import math
from typing import List, Tuple

import torch
from simuleval.agents import TextToTextAgent
from simuleval.agents.actions import ReadAction, WriteAction

from .attention.monotonic import check_stop_threshold
from .choices import STOP_RULES
from .errors import VisionAttnError
from .simultaneous import streaming_attention


def simuleval_delays(delays: List[float], src_len: int) -> Tuple[List[float], int]:
    """Generator delays (EOS step included, |x| with EOS) -> SimulEval's (no EOS on either side)."""
    words = src_len - 1
    return [min(d, words) for d in delays[:-1]], words


class StreamingAgent(TextToTextAgent):
    """Greedy simultaneous decoding of a ``lstm_monotonic`` / ``lstm_mocha`` / ``lstm_milk`` /
    ``lstm_waitk`` checkpoint, one SimulEval action at a time."""

    def __init__(self, args):
        super().__init__(args)
        from fairseq import checkpoint_utils

        import fairseq_vision_attn  # noqa: F401  (registers the archs before loading)

        overrides = {"data": args.data_bin} if args.data_bin else {}
        try:
            models, _, task = checkpoint_utils.load_model_ensemble_and_task(
                [args.checkpoint], arg_overrides=overrides
            )
        except FileNotFoundError as err:  # the dictionaries' directory, as given or as trained
            where = "--data-bin" if args.data_bin else "the data-bin the checkpoint was trained on"
            raise VisionAttnError(
                f"{err.filename}: no such directory ({where}, where dict.*.txt is read): pass --data-bin DIR"
            ) from None
        self.model = models[0].eval()
        mechanism = streaming_attention(self.model)
        if mechanism is None:
            raise VisionAttnError(
                f"{args.checkpoint} is not a streaming checkpoint "
                "(lstm_monotonic, lstm_mocha, lstm_milk, lstm_waitk)"
            )
        if args.test_waitk_lagging is not None:
            if not hasattr(mechanism, "lagging"):
                raise VisionAttnError("--test-waitk-lagging needs a wait-k checkpoint (--arch lstm_waitk)")
            mechanism.lagging = args.test_waitk_lagging
        if args.monotonic_stop is not None:
            if not hasattr(mechanism, "stop_rule"):
                raise VisionAttnError(
                    "--monotonic-stop needs a model with a monotonic head "
                    "(lstm_monotonic, lstm_mocha, lstm_milk)"
                )
            mechanism.stop_rule = args.monotonic_stop
        q = args.monotonic_stop_threshold
        if q is not None:
            if not hasattr(mechanism, "stop_threshold"):
                raise VisionAttnError(
                    "--monotonic-stop-threshold needs a model with a monotonic head "
                    "(lstm_monotonic, lstm_mocha, lstm_milk)"
                )
            mechanism.stop_threshold = check_stop_threshold(q)
        self.src_dict, self.tgt_dict = task.source_dictionary, task.target_dictionary
        self.max_len_a, self.max_len_b = args.max_len_a, args.max_len_b
        self.written: List[int] = []

    @staticmethod
    def add_args(parser):
        parser.add_argument("--checkpoint", required=True, help="a streaming checkpoint of this package")
        parser.add_argument(
            "--data-bin", default=None, help="directory of the dictionaries (default: as trained)"
        )
        parser.add_argument("--max-len-a", type=float, default=0.0, help="at most a * |x| + b target tokens")
        parser.add_argument("--max-len-b", type=int, default=200)
        parser.add_argument("--test-waitk-lagging", type=int, default=None, help="wait-k: decode with this k")
        parser.add_argument(
            "--monotonic-stop",
            choices=STOP_RULES,
            default=None,
            help="monotonic head's test-time rule: energy (default) or cumulative (as fairseq-generate's)",
        )
        parser.add_argument(
            "--monotonic-stop-threshold",
            type=float,
            default=None,
            help="where that rule stops instead of 1/2 (0 < Q < 1; as fairseq-generate's)",
        )

    def reset(self):
        super().reset()
        self.written = []

    @torch.no_grad()
    def policy(self, states=None):
        states = states or self.states
        finished = states.source_finished
        if not states.source and not finished:
            return ReadAction()
        src = [self.src_dict.index(word) for word in states.source] + (
            [self.src_dict.eos()] if finished else []
        )
        if not src:  # an empty source line: read nothing, write nothing
            return WriteAction("", finished=True)
        src_tokens = torch.tensor([src])
        encoder_out = self.model.encoder(src_tokens, torch.tensor([len(src)]))
        encoder_out["source_finished"] = [torch.tensor([finished])]
        prev = torch.tensor([[self.tgt_dict.eos()] + self.written])
        logits, extra = self.model.decoder(prev, encoder_out=encoder_out)
        if bool(extra["attention_extras"]["needs_source"][0, -1]) and not finished:
            return ReadAction()
        lprobs = torch.log_softmax(logits[0, -1].float(), dim=-1)
        lprobs[self.tgt_dict.pad()] = -math.inf
        if not self.written:
            lprobs[self.tgt_dict.eos()] = -math.inf  # fairseq's min_len = 1
        limit = int(self.max_len_a * len(src) + self.max_len_b) if finished else 1 << 30
        token = self.tgt_dict.eos() if len(self.written) + 1 >= limit else int(lprobs.argmax())
        if token == self.tgt_dict.eos():
            return WriteAction("", finished=True)
        self.written.append(token)
        return WriteAction(self.tgt_dict[token], finished=False)
