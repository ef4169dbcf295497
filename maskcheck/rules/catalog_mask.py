"""Metadata of the mask-tensor rules MC001-MC051 (checks live in `mask_rules`)."""

from __future__ import annotations

from maskcheck.model import Severity
from maskcheck.rules.registry import RuleInfo, register

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

register(RuleInfo(
    "MC001", "nan-in-mask", E, "mask",
    "The mask holds NaN.",
    "A NaN in an additive mask turns the whole score row into NaN after softmax, and "
    "0 * NaN = NaN keeps it alive in a multiplicative one. The output rows it touches are NaN "
    "and so are the gradients of everything upstream.",
    "mask = torch.log(keep.float())            # log(0) = -inf, fine... \n"
    "mask = mask - mask.max()                   # -inf - -inf = NaN",
    "mask = torch.zeros(L, S).masked_fill(~keep, float('-inf'))",
    "build the mask with masked_fill/torch.where from a bool mask, never by arithmetic on -inf",
))
register(RuleInfo(
    "MC002", "fully-masked-row", E, "mask",
    "A query row (or a whole sequence) can attend to nothing.",
    "Softmax over a row where every key is masked is 0/0. What comes out depends on the path: "
    "F.scaled_dot_product_attention returns zeros since torch 2.5 (_safe_softmax, "
    "pytorch/pytorch#131060), nn.MultiheadAttention's need_weights=True path and its eval fast "
    "path return NaN (pytorch/pytorch#41508), an eager softmax returns NaN, and a finfo.min "
    "mask gives uniform attention over the masked keys (in fp16, the unmasked result). NaN "
    "poisons the gradients of the whole batch. Rows of padded *queries* (in a left-padded causal "
    "mask a pad token sees neither the past padding nor itself; a padding mask of the same file "
    "or call also says which queries are padding) are empty by construction; those are reported "
    "as info, since their outputs are discarded (if they are kept, zero them: SDPA gives zeros, "
    "other paths NaN or uniform attention). Rows of real tokens that see nothing, or sequences "
    "that are all padding, are errors.",
    "key_padding_mask = torch.tensor([[False, False, False],\n"
    "                                 [True,  True,  True]])   # sequence 1 is all padding\n"
    "mha(x, x, x, key_padding_mask=key_padding_mask)           # NaN for sequence 1",
    "keep = lengths > 0                     # drop empty sequences from the batch, or\n"
    "out = out.masked_fill(~row_has_key[..., None], 0.0)  # zero rows that see nothing",
    "make sure every query keeps at least one key (drop empty sequences, or keep the diagonal)",
))
register(RuleInfo(
    "MC010", "inverted-convention", E, "mask",
    "The mask's values say one convention, its name, role or declared API the other.",
    "True means 'masked' to nn.MultiheadAttention and 'may attend' to "
    "F.scaled_dot_product_attention, FlexAttention and Hugging Face; a 2-D Hugging Face "
    "attention_mask is cast with .to(bool), so an additive 0/-inf mask given there keeps "
    "exactly the masked keys. An inverted mask does not crash: a causal decoder silently sees "
    "the future (rasbt/LLMs-from-scratch#1061). maskcheck flags this only when the values "
    "clearly say the other convention (a causal mask keeps its diagonal; a padding mask keeps "
    "the real tokens).",
    "causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)  # MHA: True = masked\n"
    "F.scaled_dot_product_attention(q, k, v, attn_mask=causal)            # SDPA: True = keep",
    "keep = ~causal   # or torch.tril(torch.ones(L, L, dtype=torch.bool))\n"
    "F.scaled_dot_product_attention(q, k, v, attn_mask=keep)",
    "invert the mask for the API that reads it (~mask for bool, 1 - mask for 0/1)",
))
register(RuleInfo(
    "MC011", "wrong-sign", E, "mask",
    "An additive mask holds large positive values.",
    "Additive masks are added to the attention scores: 0 keeps a key, a large negative number "
    "hides it. A large positive value does the opposite: softmax puts all the weight on the "
    "'masked' keys.",
    "mask = (1 - keep.float()) * 1e9        # +1e9 on masked keys",
    "mask = (1 - keep.float()) * torch.finfo(q.dtype).min",
    "negate the masked value: use -inf or torch.finfo(dtype).min",
))
register(RuleInfo(
    "MC012", "multiplicative-as-additive", E, "mask",
    "A float 0/1 mask where an additive one is expected: it masks nothing.",
    "Every torch attention API adds a float mask to the scores. A 0/1 float mask adds +1 to "
    "the kept keys and 0 to the masked ones, which shifts scores slightly and hides nothing "
    "(pytorch/pytorch#103963, huggingface/transformers#32195). An all-ones float mask gives "
    "exactly the unmasked output.",
    "attn_mask = torch.tril(torch.ones(L, L))           # float 0/1\n"
    "F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)   # NOT causal",
    "attn_mask = torch.tril(torch.ones(L, L, dtype=torch.bool))     # bool, True = keep\n"
    "F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)",
    "pass mask.bool() (True = keep) to SDPA, or (1 - mask) * finfo.min as an additive mask",
))
register(RuleInfo(
    "MC013", "weak-mask-value", W, "mask",
    "The masked value is too small in magnitude to suppress attention.",
    "An additive mask value v leaves weight exp(s + v) on a masked key, and masked keys take "
    "part whenever raw scores span about |v|. Raw scores of unscaled or large models reach 1e5 "
    "(TransformerLens#318 leaked with -1e5). maskcheck's thresholds: |v| >= 1e4 for float16 "
    "masks (the format tops out at 65504, so -1e4 is the usual safe choice there) and "
    "|v| >= 1e6 for wider dtypes; -inf and torch.finfo(dtype).min always pass. Negative values "
    "smaller than 1e3 beside others are read as a bias, not a mask.",
    "mask = torch.triu(torch.full((L, L), -10.0), diagonal=1)",
    "mask = torch.triu(torch.full((L, L), float('-inf')), diagonal=1)",
    "use -inf (with SDPA) or torch.finfo(dtype).min",
))
register(RuleInfo(
    "MC014", "mixed-convention", E, "mask",
    "Kept positions hold 1 as in a multiplicative mask, masked ones a large negative as in an "
    "additive one.",
    "Half multiplicative, half additive: multiplied into the weights it makes masked weights "
    "hugely negative (or -inf * 0 = NaN), added to the scores it relies on softmax's shift "
    "invariance and any other kept value breaks it. It is wrong whichever way it is applied.",
    "mask = torch.where(keep, 1.0, float('-inf'))",
    "mask = torch.where(keep, 0.0, float('-inf'))   # additive, or keep.float() to multiply",
    "use 0 for kept positions in an additive mask",
))
register(RuleInfo(
    "MC020", "dtype-overflow", W, "mask",
    "A masked value is not representable in the mask's or query's dtype and becomes -inf.",
    "float16 tops out at 65504. -1e9 cast to fp16 silently becomes -inf (and masked_fill with "
    "-1e9 on a half tensor raises 'value cannot be converted to type c10::Half without "
    "overflow', NVIDIA/apex#1052). -inf is fine for SDPA but gives NaN in an eager softmax on "
    "fully masked rows.",
    "mask = torch.zeros(L, S).masked_fill(~keep, -1e9)   # float32\n"
    "scores.half() + mask.half()                          # -1e9 -> -inf",
    "mask = torch.zeros(L, S, dtype=q.dtype).masked_fill(~keep, torch.finfo(q.dtype).min)",
    "use torch.finfo(query.dtype).min, built in the query's dtype",
))
register(RuleInfo(
    "MC021", "finfo-min-sum", INFO, "mask",
    "Values at finfo.min: adding a second mask overflows to -inf.",
    "finfo.min is the safest masked value for an eager softmax (no NaN), but it leaves no room: "
    "finfo.min + finfo.min = -inf in fp16, bf16 and fp32. Summing a causal and a padding mask "
    "built this way brings -inf back and, in fully masked rows, NaN (huggingface/transformers "
    "#27114, NVIDIA-NeMo/Automodel#2658).\n\n"
    "Opt-in: every correct Hugging Face eager mask holds finfo.min, so this rule runs only when "
    "asked for by code, name or ALL (--select MC021, --select ALL, extend-select in "
    "pyproject.toml). MC023 reports the overflow itself whenever it has happened.",
    "mask = causal_min + padding_min            # both filled with finfo.min",
    "mask = torch.where(causal_bool | pad_bool, torch.finfo(dtype).min, 0.0)",
    "combine bool masks with | and convert once, or clamp(min=finfo.min) after adding",
    opt_in=True,
))
register(RuleInfo(
    "MC022", "dtype-mismatch", W, "mask",
    "An integer mask where bool/float is expected, or a float mask whose dtype differs from "
    "the query's.",
    "nn.MultiheadAttention rejects integer masks ('only bool and floating types of attn_mask "
    "are supported'), F.scaled_dot_product_attention raises for them, and SDPA refuses a float "
    "mask that is neither the query's dtype nor float32 (bf16 query + fp16 mask, torch 2.13). "
    "Hugging Face's 2-D int attention_mask is the exception: it is meant to be int.",
    "key_padding_mask = (input_ids == pad_id).long()",
    "key_padding_mask = input_ids == pad_id          # bool",
    "convert with .bool() (mind the direction) or .to(query.dtype)",
))
register(RuleInfo(
    "MC023", "summed-mask-overflow", W, "mask",
    "-inf beside finfo.min values: two finfo.min masks were added and overflowed.",
    "Where both summed masks hide a key, finfo.min + finfo.min = -inf. In a fully masked row "
    "the -inf keys get weight 0 and the remaining finfo.min keys share the weight, so a padded "
    "query attends to an arbitrary (possibly future) key instead of spreading uniformly; a row "
    "whose every cell overflowed is NaN (huggingface/transformers#27114).",
    "mask = causal_min + padding_min",
    "mask = torch.where(causal_bool | pad_bool, torch.finfo(dtype).min, 0.0)",
    "combine the bool masks first, convert once",
))
register(RuleInfo(
    "MC030", "shape-mismatch", E, "mask",
    "The shape fits no layout of the declared API.",
    "nn.MultiheadAttention takes key_padding_mask (N, S) and attn_mask (L, S) or "
    "(N*num_heads, L, S) and rejects 4-D masks; SDPA broadcasts to (N, H, L, S); Hugging Face "
    "takes (N, S) or (N, 1, L, S). A mask of another rank is either refused or broadcast into "
    "something unintended.",
    "mha(x, x, x, attn_mask=mask4d)        # (N, 1, L, S): MHA rejects 4-D",
    "mha(x, x, x, attn_mask=mask4d.expand(N, H, L, S).reshape(N * H, L, S))",
    "reshape the mask to a layout the API accepts",
))
register(RuleInfo(
    "MC031", "broadcast-trap", E, "mask",
    "A (N, S) padding mask given as SDPA attn_mask broadcasts over queries, not batch.",
    "SDPA aligns mask dims from the right: a 2-D mask is (L, S), so row i of an (N, S) padding "
    "mask is applied to query i of EVERY sequence. When N == L no error is raised and the "
    "result is silently wrong; an (N, 1, S) mask is read as (1, H, 1, S), heads instead of "
    "batch (conventions.md §2.6).",
    "F.scaled_dot_product_attention(q, k, v, attn_mask=keep)      # keep: (N, S)",
    "F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])  # (N,1,1,S)",
    "add the head and query axes: mask[:, None, None, :]",
))
register(RuleInfo(
    "MC032", "query-axis-padding", E, "mask",
    "A padding mask laid along the query axis, e.g. (N, 1, L, 1).",
    "Padding must hide padded *keys* (the last axis). Built with .unsqueeze(1).unsqueeze(3) "
    "instead of .unsqueeze(1).unsqueeze(2), the mask hides the rows of padded queries and "
    "leaves padded keys visible to every real token; with -inf the padded rows are NaN "
    "(hyunwoongko/transformer#40).",
    "mask = (ids != pad).unsqueeze(1).unsqueeze(3)     # (N, 1, L, 1)",
    "mask = (ids != pad).unsqueeze(1).unsqueeze(2)     # (N, 1, 1, S)",
    "put the padding on the last (key) axis",
))
register(RuleInfo(
    "MC040", "causal-diagonal-masked", E, "mask",
    "A causal mask that also hides the diagonal.",
    "torch.triu(..., diagonal=0) of a -inf or True matrix masks the diagonal too: each token "
    "cannot see itself and the first query sees nothing (MC002).\n\n"
    "Beyond causal masks: in a self-attention mask (L == S) every real query keeps its own key "
    "(causal, windows, chunks, packed documents, prefix-LM, image blocks all do). A mask that "
    "hides the diagonal from every query that attends anything is inverted, or built with the "
    "wrong diagonal, whatever its shape.",
    "mask = torch.triu(torch.full((L, L), float('-inf')), diagonal=0)",
    "mask = torch.triu(torch.full((L, L), float('-inf')), diagonal=1)",
    "use diagonal=1",
))
register(RuleInfo(
    "MC041", "anti-causal", W, "mask",
    "Triangular the wrong way round: every query attends to the future.",
    "A look-ahead mask transposed (pytorch/pytorch#29546) lets early tokens see the whole "
    "future and later tokens see only themselves. Bidirectional models never need it.",
    "mask = torch.tril(torch.full((L, L), float('-inf')), diagonal=-1)",
    "mask = torch.triu(torch.full((L, L), float('-inf')), diagonal=1)",
    "transpose the mask, or build it with triu(diagonal=1)",
))
register(RuleInfo(
    "MC042", "scattered-padding", W, "mask",
    "Padding not contiguous at one end of the sequence.",
    "Real batches pad at the right (training) or the left (generation). Masked keys in the "
    "middle of a padding mask usually mean a random or mis-indexed mask "
    "(pytorch/pytorch#26098 built one with torch.rand(...) < 0.7).",
    "key_padding_mask = torch.rand(N, S) < 0.7",
    "key_padding_mask = torch.arange(S)[None, :] >= lengths[:, None]",
    "build padding from the sequence lengths",
))
register(RuleInfo(
    "MC050", "dense-causal-mask", INFO, "mask",
    "Exactly causal: pass is_causal=True instead.",
    "A dense causal mask costs L*S memory and bandwidth. On CUDA, FlashAttention takes "
    "is_causal but not an arbitrary mask, so a mask sends the call to another kernel (as "
    "PyTorch's SDPA and transformers' masking_utils document it; `maskcheck replay --device "
    "cuda` shows which kernel runs on yours). is_causal=True gives the same result "
    "(upper-left aligned, checked on CPU) without the tensor.",
    "F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tril(torch.ones(L, L, dtype=bool)))",
    "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
    "drop the mask and pass is_causal=True",
))
register(RuleInfo(
    "MC051", "redundant-broadcast-dims", INFO, "mask",
    "Identical across batch/head dims: store with size-1 dims.",
    "Every attention API broadcasts size-1 batch and head dims. Materialising copies multiplies "
    "the mask's memory and bandwidth by N*H for nothing.",
    "mask = causal.expand(N, H, L, S).contiguous()",
    "mask = causal[None, None]            # (1, 1, L, S)",
    "keep size-1 dims and let broadcasting do the rest",
))
