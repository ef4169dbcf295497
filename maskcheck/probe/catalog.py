"""Metadata of the probe rules MC070-MC077 (checked by `maskcheck.probe` on a module's outputs).

Standard library only, so `maskcheck rules` and `explain` list them without torch.
"""

from __future__ import annotations

from maskcheck.model import Severity
from maskcheck.rules.registry import RuleInfo, register

register(RuleInfo(
    "MC070", "future-leak", Severity.ERROR, "probe",
    "Under --causal, an output depends on a later real position.",
    "A decoder trained with a leak learns to read the answer from the future and falls apart "
    "at generation time, with nothing to show for it during training but a suspiciously low "
    "loss. The probe changes the content of one real position at a time and watches every "
    "earlier output of the same sequence: one that moves beyond the tolerance depends on the "
    "future. The usual causes are a missing causal mask, a mask built the wrong way round "
    "(triu instead of tril), or an additive -1e9 mask multiplied into the scores instead of "
    "added (the seed's `x * self.mask`).",
    "scores = q @ k.transpose(-2, -1) / d ** 0.5\n"
    "scores = scores * self.mask          # mask holds 1 and -1e9: multiplied, not added\n"
    "out = scores.softmax(-1) @ v",
    "causal = torch.ones(L, L, dtype=torch.bool).tril()\n"
    "scores = scores.masked_fill(~causal, float('-inf'))\n"
    "out = scores.softmax(-1) @ v",
    "mask later keys: a lower-triangular keep mask, or is_causal=True in SDPA",
))
register(RuleInfo(
    "MC071", "padding-leak", Severity.ERROR, "probe",
    "Changing only the content of pad positions changes a real output.",
    "Pad positions hold whatever the collator put there. If a real token's output depends on "
    "them, the same sentence gets different results depending on the filler, the batch it "
    "landed in and the padding side. The probe rewrites only the pad positions and compares "
    "every real output. Typical causes: no key padding mask, an inverted one (True where the "
    "API expects False), a mean-pool or a convolution over the padded axis.",
    "pooled = x.mean(dim=1)                      # pads included\n"
    "out, _ = mha(x, x, x)                       # no key_padding_mask",
    "pooled = (x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)\n"
    "out, _ = mha(x, x, x, key_padding_mask=~keep)",
    "mask padded keys out of attention and out of every pooling",
))
register(RuleInfo(
    "MC072", "padding-dependence", Severity.ERROR, "probe",
    "The amount or side of padding, or running a sequence alone without padding, changes its "
    "real outputs.",
    "A sequence must give the same outputs whether it is padded on the left or on the right, "
    "by two tokens or by ten, or run alone. Hugging Face tests its models for this "
    "(left-padding compatibility, batching equivalence), because position ids that count pads, "
    "absolute position embeddings indexed by layout, or pad tokens that leak all make batched "
    "generation differ from single-sequence generation. The probe runs the same sequences "
    "with both sides, with more padding and alone; it may report this together with MC071.",
    "pos = torch.arange(L)                       # counts the left pads as positions\n"
    "x = x + self.pos_emb(pos)",
    "pos = (keep.cumsum(-1) - 1).clamp(min=0)    # real tokens get 0, 1, 2, ...\n"
    "x = x + self.pos_emb(pos)",
    "derive positions from the keep mask and mask padded keys",
))
register(RuleInfo(
    "MC073", "batch-leak", Severity.ERROR, "probe",
    "A sequence's real outputs depend on the content or padding of another sequence of the "
    "batch.",
    "Sequences of a batch must not see each other. A reshape that uses .view where a "
    "transpose was needed (heads and batch swapped), a normalisation over the batch axis, or "
    "a mask broadcast over the wrong dimension (an (N, S) padding mask given as SDPA's "
    "attn_mask, MC031) all mix them. The probe changes one sequence (each position, its "
    "padding, an all-padding neighbour) and watches the others.",
    "q = q.view(N * H, L, D)          # (N, L, H, D) viewed without moving H next to N",
    "q = q.view(N, L, H, D).transpose(1, 2).reshape(N * H, L, D)",
    "keep the batch axis apart in every reshape and reduction",
))
register(RuleInfo(
    "MC074", "nan-in-real-output", Severity.ERROR, "probe",
    "NaN/inf in a real position's output in any probe batch (one all-padding sequence, a batch "
    "of one, length 1, or any other).",
    "The seed's advice: test an all-padding sequence, a batch of one and a sequence of length "
    "1. A fully-masked query row gives NaN on some paths (softmax of all -inf, "
    "pytorch/pytorch#41508), a -1e9 fill becomes -inf in float16, and NaN at a pad position of "
    "one layer reaches the real tokens of the next through 0 * NaN in the value product "
    "(pytorch/pytorch#101967). The probe runs "
    "those batches and checks every real output for NaN and inf.",
    "scores = scores.masked_fill(~keep[:, None, :], float('-inf'))\n"
    "attn = scores.softmax(-1)         # a query with no key: NaN row",
    "scores = scores.masked_fill(~keep[:, None, :], torch.finfo(scores.dtype).min)\n"
    "attn = scores.softmax(-1).masked_fill(~keep[:, None, :], 0.0)",
    "give every query a key, or zero the rows that have none",
))
register(RuleInfo(
    "MC075", "blind-spot", Severity.ERROR, "probe",
    "A real position the intent says must influence an output has no influence (the diagonal "
    "masked, everything masked, a window too small).",
    "The opposite of a leak: the mask hides something it should not. A causal mask built "
    "with triu(diagonal=0) hides each token from itself (MC040/MC503), an inverted padding "
    "mask hides the real tokens and keeps the pads, an off-by-one window drops the last key. "
    "The model trains anyway and quietly gets worse. The probe changes each real position and "
    "reports the intended pairs (query, key) whose output did not move at all.",
    "mask = torch.triu(torch.ones(L, L, dtype=torch.bool))      # hides the diagonal too\n"
    "scores = scores.masked_fill(mask, float('-inf'))",
    "mask = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)\n"
    "scores = scores.masked_fill(mask, float('-inf'))",
    "hide only what the intent excludes",
))
register(RuleInfo(
    "MC076", "impl-mismatch", Severity.ERROR, "probe",
    "hf targets: eager / sdpa / flex (or padded / packed) disagree on real tokens.",
    "Transformers builds a different mask for each attention implementation, and packed "
    "(padding-free) batches take yet another route, through position ids. A mistake in one "
    "route shows as a disagreement with the others on the same tokens. The probe runs the same "
    "padded batch with eager and sdpa attention, and (causal models on transformers' "
    "masking_utils) the same sequences packed into one row, and compares the real tokens' "
    "outputs.",
    "model = AutoModel.from_pretrained(path, attn_implementation='sdpa')\n"
    "# outputs differ from attn_implementation='eager' on the same padded batch",
    "maskcheck probe hf:path/to/model --causal     # names the sequences and tokens that differ",
    "report the disagreement upstream; pin the implementation that agrees with eager",
))
register(RuleInfo(
    "MC077", "window-leak", Severity.ERROR, "probe",
    "With --window W, an output depends on a real position more than W - 1 positions away.",
    "A sliding-window model must not see beyond its window, or its cache (which keeps only "
    "the last W keys) gives different results at inference than the full mask did in "
    "training. The probe changes each real position and reports pairs outside the window. "
    "For a stack of n sliding-window layers of W keys the receptive field is n * (W - 1) + 1: "
    "declare that as --window when probing a whole model. (An extension of the contract's "
    "MC070-MC076.)",
    "allowed = (i - j) <= W                      # off by one: W + 1 keys",
    "allowed = (j <= i) & ((i - j) < W)          # W keys, itself included",
    "build the window from (i - j) < W",
))
