"""Metadata of the source rules MC501-MC525 (checks live in `maskcheck.lint.checks`)."""

from __future__ import annotations

from maskcheck.model import Severity
from maskcheck.rules.registry import RuleInfo, register

E, W = Severity.ERROR, Severity.WARNING

LARGE_NEGATIVE_LITERAL = register(RuleInfo(
    "MC501", "large-negative-literal", W, "source",
    "masked_fill / additive mask with -1e9-style literals: overflows fp16.",
    "float16 holds nothing beyond 65504 in magnitude. `scores.masked_fill(mask, -1e9)` on fp16 "
    "scores raises 'value cannot be converted to type c10::Half without overflow', and an "
    "additive mask built as `(1 - mask) * -1e9` becomes -inf once cast to fp16, so a fully "
    "masked row turns into NaN after softmax. The same code works in fp32, which is why it "
    "survives until someone turns on autocast or loads the model in half precision. bfloat16 "
    "has float32's range, so -1e9 is finite there: the rule stays silent on a tensor the file "
    "shows to be float32 or bfloat16 (`.float()`, `dtype=torch.bfloat16`), and on a file whose "
    "project never runs float16: when neither the file nor anything in its project (the "
    "nearest folder above it with .git, pyproject.toml, setup.py or setup.cfg: sources, "
    "notebooks, configs, scripts, docs; not tests, nor a .py file's comments and docstrings) "
    "mentions `torch.float16`, `.half()`, fp16, autocast, apex's amp or mixed precision (not "
    "bfloat16's autocast, a disabled one, a dtype list or a GradScaler alone); where only "
    "Python files of the project say so, one of them must import this file, directly or "
    "through one other file (a trainer's autocast runs its model and the model's layers). "
    "A file in no "
    "project is always checked. The "
    "forms that give -inf in float16 instead of raising (a bias product, a difference, "
    "torch.where, an indexed write) are reported only where the file itself speaks of float16.",
    "scores = scores.masked_fill(mask == 0, -1e9)",
    "scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)",
    "use torch.finfo(x.dtype).min (or float('-inf') with a safe softmax) instead of the literal",
))
INVERTED_MASK_ARGUMENT = register(RuleInfo(
    "MC502", "inverted-mask-argument", W, "source",
    "A name with one convention passed where the other is expected, e.g. HF `attention_mask` "
    "as `key_padding_mask`.",
    "A Hugging Face `attention_mask` holds 1 for real tokens; nn.MultiheadAttention's "
    "`key_padding_mask` takes True for padding. Passed straight through, the model attends "
    "only to the padding and ignores every real token. The reverse happens with "
    "F.scaled_dot_product_attention, whose boolean `attn_mask` means True = may attend: a "
    "`key_padding_mask` (True = padding) passed as `attn_mask` keeps exactly the padding.",
    "mha = torch.nn.MultiheadAttention(64, 8, batch_first=True)\n"
    "out, _ = mha(x, x, x, key_padding_mask=attention_mask)",
    "mha = torch.nn.MultiheadAttention(64, 8, batch_first=True)\n"
    "out, _ = mha(x, x, x, key_padding_mask=attention_mask == 0)",
    "invert the mask where the conventions meet (`~m`, `m == 0`, `m.logical_not()`)",
))
TRIU_DIAGONAL_ZERO = register(RuleInfo(
    "MC503", "triu-diagonal-zero", E, "source",
    "triu of a -inf/True matrix with diagonal=0 hides the diagonal.",
    "`torch.triu(m)` keeps the main diagonal (diagonal=0 is the default). Applied to a matrix "
    "of -inf (or of True in a True = masked mask) it masks every query's own position as well "
    "as the future; the first query can attend to nothing, so its row is NaN (or zeros, or "
    "uniform, depending on the kernel). A causal mask needs diagonal=1. The same holds for "
    "-inf written through `torch.triu_indices(n, n)` (offset 0 by default): use offset=1.",
    "mask = torch.triu(torch.full((n, n), float('-inf')), diagonal=0)",
    "mask = torch.triu(torch.full((n, n), float('-inf')), diagonal=1)",
    "pass diagonal=1 to triu for a causal mask",
    safe_fix=True,
    fix_covers="a `triu` call (its diagonal becomes 1); -inf written through `triu_indices` is "
    "never rewritten: pass offset=1 yourself",
))
FILL_AFTER_ZERO_FILL = register(RuleInfo(
    "MC504", "fill-after-zero-fill", E, "source",
    "`m[m == 0] = -inf` on a zero-initialised mask: masks everything.",
    "A mask created with torch.zeros and then filled where it equals 0 is -inf everywhere "
    "unless something wrote non-zero values in between. Writing 0 to the blocks that should "
    "stay visible (as in the widely copied `create_block_mask` recipe) changes nothing, so "
    "every row is fully masked and attention returns NaN.",
    "mask = torch.zeros(n, n)\n"
    "for i in range(0, n, b):\n"
    "    mask[i:i + b, i:i + b] = 0\n"
    "mask[mask == 0] = float('-inf')",
    "mask = torch.full((n, n), float('-inf'))\n"
    "for i in range(0, n, b):\n"
    "    mask[i:i + b, i:i + b] = 0",
    "start from torch.full(..., float('-inf')) and write 0 where attention is allowed",
))
INPLACE_FILL_ON_GRAD = register(RuleInfo(
    "MC505", "inplace-fill-on-grad", W, "source",
    "`masked_fill_` on a tensor that requires grad.",
    "An in-place masked_fill_ on a leaf tensor that requires grad (a parameter, or a tensor "
    "made with requires_grad=True) raises 'a leaf Variable that requires grad is being used "
    "in an in-place operation'; on a non-leaf it overwrites values autograd may need and the "
    "backward pass fails or computes the wrong gradient. Use the out-of-place masked_fill.",
    "x = torch.randn(3, requires_grad=True)\n"
    "x.masked_fill_(mask, 0.0)",
    "x = torch.randn(3, requires_grad=True)\n"
    "y = x.masked_fill(mask, 0.0)",
    "use masked_fill (out of place), or do the in-place fill under torch.no_grad()",
))
CAUSAL_FLAG_WITH_MASK = register(RuleInfo(
    "MC506", "causal-flag-with-mask", W, "source",
    "`scaled_dot_product_attention(..., attn_mask=..., is_causal=True)`.",
    "F.scaled_dot_product_attention does not combine is_causal=True with an explicit "
    "attn_mask the same way on every backend: the MATH path raises, other kernels AND the two "
    "or ignore one of them. Fold the causal part into attn_mask, or drop the mask and keep "
    "is_causal=True.",
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad, is_causal=True)",
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad & causal)",
    "pass either attn_mask (with the causal part folded in) or is_causal=True, not both",
))
BOOL_MASK_ADDED = register(RuleInfo(
    "MC509", "bool-mask-added", E, "source",
    "A bool mask added to attention scores: True adds 1.0, nothing is masked.",
    "torch promotes a bool tensor to the scores' float dtype when the two are added, so "
    "`scores + mask` adds 1.0 where the mask is True and 0.0 elsewhere. Nothing is masked: "
    "the padding (or the future) keeps almost all of its attention weight. A bool mask "
    "selects positions; it has to go through masked_fill or torch.where. Any operand known "
    "to be bool counts, whatever its name (`keep`, `rand(n, n) > p`, `ids.eq(pad)`), through "
    "`+`, `+=`, torch.add and add_.",
    "mask = attention_mask == 0\n"
    "scores = scores + mask",
    "mask = attention_mask == 0\n"
    "scores = scores.masked_fill(mask, float('-inf'))",
    "use masked_fill(m, -inf) / torch.where, or turn the mask into 0/-inf first",
))
CAUSAL_FLAG_WITH_CACHE = register(RuleInfo(
    "MC510", "causal-flag-with-cache", W, "source",
    "`is_causal=True` with keys that include a cache (L != S): the mask is aligned top-left.",
    "With is_causal=True, scaled_dot_product_attention builds `tril(ones(L, S))`, aligned "
    "to the top-left corner. When the keys hold a cache (S > L), query i should see the "
    "cache plus new keys up to i, but the top-left triangle lets it see only the first i+1 "
    "keys: a single new query sees only key 0. The output is silently wrong in generation. "
    "Keys count as cached when concatenated with a cache, returned by `cache.update(...)`, "
    "read from a static cache up to the new tokens (`self.cache_k[:b, : start + n]`), or "
    "concatenated after a recurrent memory (Transformer-XL's `mems`, memory tokens: "
    "`torch.cat([mem_k, k])`, or keys projected from the memory by a layer of the module). "
    "A flag true for every step with more than one new token (`is_causal=T > 1`, Whisper's "
    "`q.shape[2] > 1`) counts too: a prompt after a prefix or a speculative draft meets the "
    "cache with several queries; Hugging Face's `attention_mask is None and q_len > 1` does "
    "not (a cache comes with a mask there).",
    "k = torch.cat([past_k, k], dim=2)\n"
    "v = torch.cat([past_v, v], dim=2)\n"
    "out = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
    "k = torch.cat([past_k, k], dim=2)\n"
    "v = torch.cat([past_v, v], dim=2)\n"
    "L, S = q.shape[-2], k.shape[-2]\n"
    "keep = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)\n"
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)",
    "pass an explicit mask aligned bottom-right (tril(diagonal=S - L)), or is_causal=False "
    "for a single query",
))
FLIPPED_BOOL_DIRECTION = register(RuleInfo(
    "MC511", "flipped-bool-direction", W, "source",
    "A mask built as True = padding given where True = keep is meant (or the reverse).",
    "nn.MultiheadAttention's bool masks mean True = masked; scaled_dot_product_attention's "
    "bool attn_mask means True = may attend. A tokenizer's attention_mask turned into True "
    "at padding (`mask == 0`, `~mask.bool()`) and handed to SDPA keeps only the padding; "
    "the tokenizer's keep-mask (`mask.bool()`) handed to key_padding_mask masks every real "
    "token. This rule follows the value from the tokenizer output, beyond MC502's names.",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "pad = enc['attention_mask'] == 0\n"
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "keep = enc['attention_mask'].bool()\n"
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])",
    "for SDPA pass True = attend (`m.bool()`); for MHA pass True = padding (`m == 0`)",
))
BOOL_MASK_SUBTRACT = register(RuleInfo(
    "MC512", "bool-mask-subtract", E, "source",
    "`1 - mask` (or `mask - 1`) on a bool mask: torch raises (no `-` on bool tensors).",
    "torch refuses subtraction with a bool tensor: `1 - mask` raises 'Subtraction, the `-` "
    "operator, with a bool tensor is not supported. If you are trying to invert a mask, use "
    "the `~` or `logical_not()` operator instead.' The code works while the mask is an int "
    "or float 0/1 tensor and breaks as soon as it is made with a comparison or `.bool()`.",
    "keep = attention_mask > 0\n"
    "pad = 1 - keep",
    "keep = attention_mask > 0\n"
    "pad = ~keep",
    "invert with `~mask` or mask.logical_not(); `1 - mask.float()` for a float mask",
    safe_fix=True,
    fix_covers="`1 - mask` where a bool can stand (a fill, select or where condition, an index, "
    "`&`/`|`/`^`: it becomes `~mask`); `1 - mask` elsewhere, `mask - 1`, other constants and a "
    "bool passed to a function that subtracts it are left for you",
))
FINFO_MIN_SUMMED = register(RuleInfo(
    "MC513", "finfo-min-summed", W, "source",
    "Two masks filled with finfo(dtype).min added together: the sum overflows to -inf.",
    "torch.finfo(dtype).min is the most negative finite value; adding two of them overflows "
    "to -inf (in float16, bfloat16 and float32 alike). Where both masks hide a position the "
    "combined mask is -inf. A row every key of which is hidden (a padded query) is then no "
    "longer uniform: it puts all its weight on the keys hidden only once, padding or future "
    "ones (transformers PR #27114), and a row whose every cell overflows is NaN after softmax, "
    "in the outputs and the gradients (NVIDIA-NeMo/Automodel PR #2658, bfloat16 planes). Rows "
    "of real queries that keep some key are unchanged. Combine the masks before filling, or "
    "clamp the sum.",
    "causal = torch.zeros(n, n).masked_fill(future, torch.finfo(dtype).min)\n"
    "pad = torch.zeros(n, n).masked_fill(padding, torch.finfo(dtype).min)\n"
    "mask = causal + pad",
    "mask = torch.zeros(n, n).masked_fill(future | padding, torch.finfo(dtype).min)",
    "fill once with the combined bool mask (`a | b`), or use torch.minimum / clamp",
))
PADDING_ON_QUERY_AXIS = register(RuleInfo(
    "MC514", "padding-on-query-axis", E, "source",
    "A (batch, seq) padding mask laid out as (batch, 1, seq, 1): it hides query rows, not keys.",
    "Attention scores are (batch, heads, queries, keys) and softmax runs over the keys, the "
    "last axis. A padding mask made from token ids (`ids != pad_id`, a tokenizer's "
    "attention_mask, a lengths test) must lie on that axis: (batch, 1, 1, seq). Built with "
    "`.unsqueeze(1).unsqueeze(3)` or `[:, None, :, None]` it lies on the query axis instead: "
    "it fills whole rows of the padded queries (NaN with -inf, uniform with -1e9) and leaves "
    "every real query free to attend to the padding keys (hyunwoongko/transformer PR #40, "
    "bentrevett/pytorch-seq2seq#96). Reported where such a mask is the masked_fill condition "
    "with a masking value, or SDPA's attn_mask. A mask combined with another first is not.",
    "src_mask = (src != pad_idx).unsqueeze(1).unsqueeze(3)\n"
    "scores = scores.masked_fill(src_mask == 0, -10000.0)",
    "src_mask = (src != pad_idx).unsqueeze(1).unsqueeze(2)\n"
    "scores = scores.masked_fill(src_mask == 0, -10000.0)",
    "put the sequence on the last axis: `[:, None, None, :]` or `.unsqueeze(1).unsqueeze(2)`",
))
PADDING_MASK_AS_ATTN_MASK = register(RuleInfo(
    "MC515", "padding-mask-as-attn-mask", E, "source",
    "A (batch, seq) padding mask given as it is to SDPA's or MultiheadAttention's attn_mask.",
    "scaled_dot_product_attention broadcasts attn_mask against (batch, heads, queries, keys) from "
    "the right, so a 2-D mask is read as (queries, keys): a (batch, seq) padding mask made from "
    "token ids (`ids != pad_id`, a tokenizer's attention_mask, the attention_mask a model's "
    "`forward(input_ids, attention_mask)` takes, unless its docstring gives it more axes; a "
    "lengths test) raises unless batch == queries, and then query i of every sequence gets "
    "sequence i's padding, silently (conventions.md 2.6). MultiheadAttention's attn_mask is "
    "(queries, keys) too; the padding mask goes to key_padding_mask. Reported where the mask "
    "reaches attn_mask with its axes unchanged (casts and `~` do not change them). A function of "
    "this file that takes a padding mask under its own name (`keep`, `padding_mask`) and hands it "
    "on bare is reported there, once for all its calls; one whose parameter is named `attn_mask` "
    "(or is SDPA under another name, `attend = lambda q, k, v, m: sdpa(q, k, v, m)`) takes SDPA's "
    "mask, so the call that passes it a (batch, seq) mask is reported.",
    "keep = input_ids != pad_id\n"
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)",
    "keep = input_ids != pad_id\n"
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])",
    "add the head and query axes (`mask[:, None, None, :]`); for MultiheadAttention pass "
    "key_padding_mask",
))
WEAK_MASK_VALUE = register(RuleInfo(
    "MC516", "weak-mask-value", W, "source",
    "Attention scores filled with a value between -1 and 0 (`-1e-9` for `-1e9`): masks almost "
    "nothing.",
    "A masked score must be so negative that softmax gives it no weight: -inf, "
    "`torch.finfo(dtype).min`, or a large negative number. A fill between -1 and 0 (often "
    "`-1e-9` or `-1e-20` typed for `-1e9`/`-1e20`, or `-1.0`) leaves the masked position with "
    "about as much weight as any other (exp(-1e-9) is 1), so the model attends to the padding "
    "or the future with no error and no NaN. Fills like -10 or -100 are not reported: whether "
    "they are weak depends on the scale of the scores, which the source does not show.",
    "scores = scores.masked_fill(mask == 0, -1e-9)\nweights = scores.softmax(dim=-1)",
    "scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)\n"
    "weights = scores.softmax(dim=-1)",
    "fill with torch.finfo(scores.dtype).min or float('-inf')",
))
WIDE_FINFO_TO_HALF = register(RuleInfo(
    "MC517", "wide-finfo-to-half", E, "source",
    "masked_fill, torch.full or torch.where of a float16/bfloat16 tensor with the float32 "
    "minimum.",
    "The float32 minimum (-3.4e38) does not fit in float16 (65504) or bfloat16 (3.39e38): "
    "masked_fill raises 'value cannot be converted to type c10::Half without overflow' (and "
    "c10::BFloat16 likewise, checked on torch 2.13), as does `-torch.finfo(torch.float32).max` "
    "and `torch.full(size, torch.finfo(torch.float32).min, dtype=torch.float16)`; torch.where "
    "does not raise but rounds it to -inf, so a row with every key masked softmaxes to NaN. A "
    "matmul inside `torch.autocast` is float16 on CUDA (bfloat16 on the CPU). Take the minimum "
    "of the tensor's own dtype.",
    "scores = scores.half()\n"
    "scores = scores.masked_fill(mask, torch.finfo(torch.float32).min)",
    "scores = scores.half()\n"
    "scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)",
    "use torch.finfo(x.dtype).min",
))
BITWISE_NOT_INT_MASK = register(RuleInfo(
    "MC518", "bitwise-not-int-mask", E, "source",
    "`~` on an integer 0/1 mask (a tokenizer's int64 attention_mask): ~1 == -2, ~0 == -1.",
    "On an integer tensor `~` is bitwise NOT: ~1 is -2 and ~0 is -1, both non-zero, so the "
    "'inverted' mask is true everywhere (and masked_fill refuses it: it needs bool). A "
    "tokenizer's attention_mask is int64; invert it with `== 0` or convert it with .bool() "
    "first.",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "pad = ~enc['attention_mask']",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "pad = enc['attention_mask'] == 0",
    "use `mask == 0` or `~mask.bool()`",
    safe_fix=True,
))
KEEP_MASK_AS_FILL_CONDITION = register(RuleInfo(
    "MC519", "keep-mask-as-fill-condition", E, "source",
    "A keep-mask (tokenizer attention_mask, 1 = real token) as the masked_fill condition.",
    "masked_fill writes the value where the condition is True. A tokenizer's attention_mask "
    "is 1 for real tokens, so `scores.masked_fill(attention_mask.bool(), -inf)` hides every "
    "real token and leaves only the padding (a row with no padding becomes NaN).",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "keep = enc['attention_mask'].bool()\n"
    "scores = scores.masked_fill(keep[:, None, None, :], float('-inf'))",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "keep = enc['attention_mask'].bool()\n"
    "scores = scores.masked_fill(~keep[:, None, None, :], float('-inf'))",
    "fill where the mask is 0: `masked_fill(attention_mask == 0, ...)`",
))
TRANSPOSED_CAUSAL_MASK = register(RuleInfo(
    "MC521", "transposed-causal-mask", E, "source",
    "A look-ahead mask built the wrong way round for its convention (tril vs triu).",
    "A causal mask hides the future (above the diagonal). masked_fill and "
    "nn.MultiheadAttention's bool attn_mask hide where the mask is True, so they need the "
    "strict upper triangle (`triu(ones, 1)`, or `tril(ones) == 0`); SDPA's bool attn_mask "
    "keeps where it is True, so it needs the lower triangle (`tril(ones)`). The other "
    "triangle hides the past and shows the future: training looks fine and generation is "
    "garbage. A triangle ANDed with a keep-mask (`tokens != pad_idx`, True = real token) is "
    "a keep-mask too, so it needs the lower triangle as well. When a function or closure of "
    "the file builds the triangle, the finding is where the builder sets its direction, "
    "naming the use (the fix goes there); a triangle turned at its use, or held in an "
    "attribute, is reported at the use.",
    "causal = torch.tril(torch.ones(n, n, dtype=torch.bool))\n"
    "scores = scores.masked_fill(causal, float('-inf'))",
    "causal = torch.tril(torch.ones(n, n, dtype=torch.bool))\n"
    "scores = scores.masked_fill(~causal, float('-inf'))",
    "masked_fill / MHA: True above the diagonal (triu(..., 1)); SDPA: True on and below (tril)",
))
ZERO_TIMES_INF = register(RuleInfo(
    "MC522", "zero-times-inf", E, "source",
    "A 0/1 matrix multiplied by float('-inf'): 0 * -inf is NaN.",
    "IEEE 754 defines 0 * inf as NaN. `torch.triu(torch.ones(n, n), 1) * float('-inf')` "
    "gives -inf above the diagonal and NaN everywhere else, so every attention row is NaN. "
    "The same holds for `(1 - m) * float('-inf')`, the usual inversion of a 0/1 mask. "
    "With -1e9 the product is 0 where the matrix is 0; with -inf it must be a fill.",
    "mask = torch.triu(torch.ones(n, n), diagonal=1) * float('-inf')",
    "mask = torch.triu(torch.full((n, n), float('-inf')), diagonal=1)",
    "use masked_fill(m.bool(), float('-inf')), torch.where or triu of a -inf matrix",
))
ADDITIVE_MASK_MULTIPLIED = register(RuleInfo(
    "MC523", "additive-mask-multiplied", E, "source",
    "An additive mask (0 / -inf or -1e9) multiplied into scores or weights.",
    "An additive mask holds 0 where attention is allowed and -inf (or a large negative) "
    "where it is not; it is meant to be added to the scores. Multiplied, it turns allowed "
    "positions into 0 (or NaN for 0 * -inf) and masked ones into +-inf: the softmax is NaN "
    "or meaningless.",
    "mask = torch.triu(torch.full((n, n), float('-inf')), diagonal=1)\n"
    "scores = scores * mask",
    "mask = torch.triu(torch.full((n, n), float('-inf')), diagonal=1)\n"
    "scores = scores + mask",
    "add an additive mask; multiply only by a 0/1 mask (after softmax)",
))
BUFFER_MUTATED_IN_FORWARD = register(RuleInfo(
    "MC524", "buffer-mutated-in-forward", W, "source",
    "`self.<buffer>.masked_fill_(...)` inside forward: the stored mask changes on every call.",
    "A mask registered with register_buffer is meant to be built once. An in-place "
    "masked_fill_ on it inside forward rewrites the buffer on every call: the first batch's "
    "padding leaks into every later batch, the state_dict holds a corrupted mask, and "
    "fills accumulate until whole rows are masked. Methods named forward_* / _forward* and "
    "closures defined in them count as forward.",
    "class M(nn.Module):\n"
    "    def __init__(self, n):\n"
    "        super().__init__()\n"
    "        self.register_buffer('mask', torch.zeros(n, n))\n"
    "    def forward(self, x, pad):\n"
    "        self.mask.masked_fill_(pad, float('-inf'))\n"
    "        return x + self.mask",
    "class M(nn.Module):\n"
    "    def __init__(self, n):\n"
    "        super().__init__()\n"
    "        self.register_buffer('mask', torch.zeros(n, n))\n"
    "    def forward(self, x, pad):\n"
    "        mask = self.mask.masked_fill(pad, float('-inf'))\n"
    "        return x + mask",
    "use the out-of-place masked_fill and keep the buffer unchanged",
))
EMPTY_ROWS = register(RuleInfo(
    "MC507", "softmax-of-empty-row", E, "source",
    "Scores filled with -inf where a pair mask is False, then softmax: padded queries' rows are "
    "NaN.",
    "A pair mask, the outer product of a mask on the query axis and one on the key axis "
    "(`keep[:, :, None] & keep[:, None, :]`), or any mask AND-ed with one on the query axis "
    "(`pair & keep[..., None]`), is False on the whole row of every padded query. "
    "Filled with -inf, that row is all -inf, and softmax of it is NaN (0 / 0; "
    "pytorch/pytorch#103749, Biohub/esm#299). The NaN does not stay there: the next layer "
    "reads the padded token as a key and value, and `weights @ v` multiplies its NaN by the "
    "weight 0, which is NaN for every token. Reported where the -inf fill's condition is "
    "such a product and the scores go to softmax, unless the function mends NaN (`nan_to_num`, "
    "`isnan`, a later `torch.where` or zero fill of the weights). SDPA is not reported: on the "
    "CPU its softmax returns zeros for such rows (torch 2.13).",
    "pair = keep[:, :, None] & keep[:, None, :]\n"
    "scores = scores.masked_fill(~pair, float('-inf'))\n"
    "weights = scores.softmax(dim=-1)",
    "scores = scores.masked_fill(~keep[:, None, :], float('-inf'))\n"
    "weights = scores.softmax(dim=-1)",
    "mask only the keys (`keep[:, None, :]`), or fill with torch.finfo(scores.dtype).min",
))
KEEP_MASK_AS_ADDITIVE = register(RuleInfo(
    "MC508", "keep-mask-as-additive", E, "source",
    "A 0/1 mask (a tokenizer's attention_mask, a bool mask cast to float) used as an additive "
    "mask: it adds 1 and masks nothing.",
    "scaled_dot_product_attention and nn.MultiheadAttention add a float attn_mask to the "
    "scores, and eager attention code adds its mask with `scores + mask`. A keep-mask of 0s "
    "and 1s (a tokenizer's attention_mask, `ids != pad_id`, a bool mask after `.float()` or "
    "`.to(q.dtype)`) used that way adds 1 to the real tokens and 0 to the padding: every "
    "position keeps almost all of its weight and the output is plausible but wrong "
    "(pytorch/pytorch#103963). The rule fires only where the 0/1 values are proven from the "
    "source (Hugging Face passes already-additive masks under the same names).",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "keep = enc['attention_mask'][:, None, None, :].float()\n"
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "keep = enc['attention_mask'][:, None, None, :].bool()\n"
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)",
    "pass a bool keep-mask to SDPA, or turn the 0/1 mask into 0/-inf "
    "(`(1.0 - m) * torch.finfo(dtype).min`) before adding it",
))
MASK_MULTIPLIED_INTO_LOGITS = register(RuleInfo(
    "MC520", "mask-multiplied-into-logits", E, "source",
    "A 0/1 mask multiplied into the logits before softmax: masked positions still get weight.",
    "Multiplying the scores by a 0/1 (or bool) mask sets the masked logits to 0, not to -inf. "
    "softmax then gives each of them exp(0) = 1 of unnormalised weight, as much as a real "
    "token with a zero score: the padding (or the future) is attended to. Multiplying after "
    "softmax (and renormalising) is correct; before it the positions must be filled. The rule "
    "fires only where the mask's 0/1 values are proven from the source (or the mask is an "
    "untouched `attention_mask`, Hugging Face's 1 = real token, as MC502 reads it) and the "
    "product goes into softmax directly or by the same name, not re-masked after it.",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "keep = enc['attention_mask'][:, None, None, :]\n"
    "weights = torch.softmax(scores * keep, dim=-1)",
    "enc = tokenizer(texts, return_tensors='pt', padding=True)\n"
    "keep = enc['attention_mask'][:, None, None, :]\n"
    "weights = torch.softmax(scores.masked_fill(keep == 0, float('-inf')), dim=-1)",
    "fill the masked logits (`masked_fill(m == 0, float('-inf'))`) before softmax, or multiply "
    "the probabilities after it and renormalise",
))
RESULT_DISCARDED = register(RuleInfo(
    "MC525", "fill-result-discarded", E, "source",
    "`x.masked_fill(m, v)` (or triu, tril, torch.where) as a statement: the result is thrown "
    "away.",
    "masked_fill, index_fill, masked_scatter, triu, tril, torch.where and logical_not return a "
    "new tensor and leave their input unchanged; only the underscore forms (`masked_fill_`, "
    "`triu_`) work in place. Called as a statement, the masked copy is discarded: the scores "
    "are never masked and the model attends to the padding or the future, with no error. "
    "Casts (`.float()`, `.to(...)`) are not reported: on an nn.Module they work in place.",
    "scores = q @ k.transpose(-2, -1)\n"
    "scores.masked_fill(pad[:, None, None, :], float('-inf'))\n"
    "weights = scores.softmax(-1)",
    "scores = q @ k.transpose(-2, -1)\n"
    "scores = scores.masked_fill(pad[:, None, None, :], float('-inf'))\n"
    "weights = scores.softmax(-1)",
    "assign the result (`x = x.masked_fill(m, v)`), or use the in-place form on a tensor that "
    "does not require grad",
))
