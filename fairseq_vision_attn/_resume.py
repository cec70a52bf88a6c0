"""Resuming fairseq-train: keep the learning-rate schedule of the run that was cut off.

fairseq-train saves a checkpoint at the end of an epoch *before* it hands that epoch's
validation loss to the learning-rate scheduler (``fairseq_cli.train``: ``train()`` validates and
saves, then ``trainer.lr_step(epoch, valid_losses[0])``), and the resume does not make that step
up: it calls ``lr_step(epoch)`` without a loss. A run resumed from an end-of-epoch
``checkpoint_last.pt`` therefore drops one step of ``reduce_lr_on_plateau``: after an epoch
that did not improve, the halving is lost and the rest of the run trains at twice the rate;
after one that did, the scheduler compares the next loss with a stale best. The torch scheduler's
count of epochs without improvement (``--lr-patience`` > 0) is not saved either.

:func:`keep_lr_schedule_on_resume` makes the resumed run follow the schedule of the same run
uninterrupted: the plateau scheduler's state also holds that count, and a resume from an
end-of-epoch checkpoint replays the step with the loss fairseq saved in it (``val_loss``).
Checkpoints saved mid-epoch (``--save-interval-updates``) had no step pending; a run that resets
its optimizer, scheduler or data loader (``--reset-*``, ``--finetune-from-model``) starts a
schedule of its own, and neither is touched.
"""

import logging

logger = logging.getLogger(__name__)


def _plateau_keeps_its_count():
    from fairseq.optim.lr_scheduler.reduce_lr_on_plateau import ReduceLROnPlateauLRSchedule as Plateau

    state_dict, load_state_dict = Plateau.state_dict, Plateau.load_state_dict
    if getattr(state_dict, "_vision_attn", False):
        return

    def plateau_state_dict(self):
        state = state_dict(self)
        state["num_bad_epochs"] = int(self.lr_scheduler.num_bad_epochs)
        return state

    def plateau_load_state_dict(self, state):
        load_state_dict(self, state)
        if "num_bad_epochs" in state:  # checkpoints saved by fairseq alone do not hold it
            self.lr_scheduler.num_bad_epochs = state["num_bad_epochs"]

    plateau_state_dict._vision_attn = True
    Plateau.state_dict, Plateau.load_state_dict = plateau_state_dict, plateau_load_state_dict


def _pending_step(cfg, extra_state, epoch_itr):
    """The (epoch, validation loss) whose scheduler step the checkpoint was saved before, or
    None when there is none to make up."""
    if extra_state is None or cfg.reset_optimizer or cfg.reset_lr_scheduler:
        return None
    saved = extra_state.get("train_iterator") or {}
    val_loss = extra_state.get("val_loss")
    # fairseq saves an epoch's end as (next epoch, 0 iterations); a reset or fine-tuned data
    # loader starts at epoch 1, which no end-of-epoch checkpoint holds
    at_epoch_end = saved.get("iterations_in_epoch") == 0 and saved.get("epoch", 1) > 1
    if val_loss is None or not at_epoch_end or epoch_itr.epoch != saved["epoch"]:
        return None
    return saved["epoch"] - 1, float(val_loss)


def keep_lr_schedule_on_resume():
    """Patch fairseq's resume (``checkpoint_utils.load_checkpoint``, which fairseq-train calls
    through the module) and the plateau scheduler's state (module docstring)."""
    from fairseq import checkpoint_utils

    _plateau_keeps_its_count()
    load = checkpoint_utils.load_checkpoint
    if getattr(load, "_vision_attn", False):
        return

    def load_checkpoint(cfg, trainer, **passthrough_args):
        extra_state, epoch_itr = load(cfg, trainer, **passthrough_args)
        pending = _pending_step(cfg, extra_state, epoch_itr)
        if pending is not None:
            epoch, val_loss = pending
            before = trainer.get_lr()
            trainer.lr_step(epoch, val_loss)
            trainer.lr_step(epoch_itr.epoch)  # the call fairseq's resume ended with
            after = trainer.get_lr()
            logger.info(
                f"learning-rate step of epoch {epoch} (validation loss {val_loss:.4g}; fairseq "
                f"saved the checkpoint before taking it) made up on resume: lr {before:.6g} -> {after:.6g}"
            )
        return extra_state, epoch_itr

    load_checkpoint._vision_attn = True
    checkpoint_utils.load_checkpoint = load_checkpoint
