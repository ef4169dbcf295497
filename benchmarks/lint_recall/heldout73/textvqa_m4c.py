"""Scene-text VQA with M4C (MMF layout): answer words come from a vocabulary or are copied from OCR tokens.

Question words, detected objects and OCR tokens are fed to one multimodal
transformer together with the previously decoded answer steps; a dynamic
pointer network scores the OCR tokens at every step.

Source: conventions.md §1 (HF attention_mask row, direction cheat-sheet); seed masked_fill_inplace.txt (作用); seed self_attention_mask_guide.txt §7 Q1.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

ANSWER_VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "yes", "no", "the", "sign", "red", "one", "two"]
HIDDEN = 48
MAX_DEC = 4


def _get_mask(nums, max_num):
    non_pad = torch.arange(max_num, device=nums.device).expand(nums.size(0), -1)
    return (non_pad < nums.unsqueeze(-1)).float()


def _get_causal_mask(seq_length, device):
    mask = torch.zeros(seq_length, seq_length, device=device)
    for i in range(seq_length):
        for j in range(i + 1):
            mask[i, j] = 1.0
    return mask


def _batch_gather(x, inds):
    batch_size, length, dim = x.shape
    batch_offsets = torch.arange(batch_size, device=inds.device) * length
    return x.reshape(batch_size * length, dim)[(inds + batch_offsets.unsqueeze(1)).view(-1)].view(batch_size, -1, dim)


class QuestionTokenizer:
    def __call__(self, questions, max_length=10):
        ids = torch.zeros(len(questions), max_length, dtype=torch.long)
        mask = torch.zeros(len(questions), max_length, dtype=torch.long)
        for i, q in enumerate(questions):
            toks = [1 + sum(map(ord, w)) % 200 for w in q.lower().split()][:max_length]
            ids[i, : len(toks)] = torch.tensor(toks)
            mask[i, : len(toks)] = 1
        return {"input_ids": ids, "attention_mask": mask}


class OcrTokenProcessor:
    def __call__(self, ocr_tokens, ocr_boxes, max_length=6):
        feats = torch.zeros(len(ocr_tokens), max_length, 32)
        boxes = torch.zeros(len(ocr_tokens), max_length, 4)
        mask = torch.zeros(len(ocr_tokens), max_length, dtype=torch.long)
        for i, (toks, bxs) in enumerate(zip(ocr_tokens, ocr_boxes)):
            for j, (tok, box) in enumerate(list(zip(toks, bxs))[:max_length]):
                g = torch.Generator().manual_seed(sum(map(ord, tok)))
                feats[i, j] = torch.randn(32, generator=g)
                boxes[i, j] = torch.tensor(box)
                mask[i, j] = 1
        return {"fasttext": feats, "boxes": boxes, "attention_mask": mask, "tokens": ocr_tokens}


class OcrPtrNet(nn.Module):
    def __init__(self, hidden_size, query_key_size=None):
        super().__init__()
        self.query_key_size = query_key_size or hidden_size
        self.query = nn.Linear(hidden_size, self.query_key_size)
        self.key = nn.Linear(hidden_size, self.query_key_size)

    def forward(self, query_inputs, key_inputs, attention_mask):
        query_layer = self.query(query_inputs)
        key_layer = self.key(key_inputs)
        scores = torch.matmul(query_layer, key_layer.transpose(-1, -2)) / math.sqrt(self.query_key_size)
        return scores.masked_fill(attention_mask.unsqueeze(1), -10000.0)  # expect: MC519 keep


class MMT(nn.Module):
    def __init__(self, hidden, heads=4, layers=2):
        super().__init__()
        self.prev_pred_embeddings = nn.Embedding(len(ANSWER_VOCAB), hidden)
        self.position_embeddings = nn.Embedding(MAX_DEC, hidden)
        self.qkv = nn.ModuleList([nn.Linear(hidden, hidden * 3) for _ in range(layers)])
        self.out = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(hidden) for _ in range(layers)])
        self.heads = heads

    def forward(self, txt_emb, txt_mask, obj_emb, obj_mask, ocr_emb, ocr_mask, prev_inds):
        vocab_emb = self.prev_pred_embeddings.weight.unsqueeze(0).expand(prev_inds.size(0), -1, -1)
        ans_ocr_emb_cat = torch.cat([vocab_emb, ocr_emb], dim=1)
        dec_emb = _batch_gather(ans_ocr_emb_cat, prev_inds) + self.position_embeddings(torch.arange(prev_inds.size(1)))
        encoder_inputs = torch.cat([txt_emb, obj_emb, ocr_emb, dec_emb], dim=1)
        dec_mask = torch.ones(dec_emb.size(0), dec_emb.size(1), device=dec_emb.device)
        attention_mask = torch.cat([txt_mask, obj_mask, ocr_mask, dec_mask], dim=1)
        to_seq_length = attention_mask.size(1)
        extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2).repeat(1, 1, to_seq_length, 1)
        extended_attention_mask[:, :, -MAX_DEC:, -MAX_DEC:] = _get_causal_mask(MAX_DEC, encoder_inputs.device)
        extended_attention_mask[:, :, :-MAX_DEC, -MAX_DEC:] = 0
        extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0
        x = encoder_inputs
        b, n, c = x.shape
        for qkv, out, norm in zip(self.qkv, self.out, self.norms):
            q, k, v = qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / math.sqrt(c // self.heads) + extended_attention_mask
            x = norm(x + out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)))
        txt_len, obj_len, ocr_len = txt_emb.size(1), obj_emb.size(1), ocr_emb.size(1)
        return x[:, txt_len + obj_len : txt_len + obj_len + ocr_len], x[:, -MAX_DEC:]


class M4C(nn.Module):
    def __init__(self, hidden=HIDDEN):
        super().__init__()
        self.word_embedding = nn.Embedding(210, hidden)
        self.obj_proj = nn.Linear(64 + 4, hidden)
        self.ocr_proj = nn.Linear(32 + 4, hidden)
        self.mmt = MMT(hidden)
        self.classifier = nn.Linear(hidden, len(ANSWER_VOCAB))
        self.ocr_ptr_net = OcrPtrNet(hidden)

    def forward(self, sample_list):
        question = sample_list["question"]
        txt_emb = self.word_embedding(question["input_ids"])
        obj = sample_list["obj"]
        obj_emb = self.obj_proj(torch.cat([obj["features"], obj["boxes"]], dim=-1))
        obj_mask = _get_mask(obj["num_boxes"], obj["features"].size(1))
        ocr = sample_list["ocr"]
        ocr_emb = self.ocr_proj(torch.cat([ocr["fasttext"], ocr["boxes"]], dim=-1))
        ocr_keep = ocr["attention_mask"].bool()
        mmt_ocr_output, mmt_dec_output = self.mmt(txt_emb, question["attention_mask"].float(), obj_emb, obj_mask, ocr_emb, ocr_keep.float(), sample_list["prev_inds"])
        fixed_scores = self.classifier(mmt_dec_output)
        dynamic_ocr_scores = self.ocr_ptr_net(mmt_dec_output, mmt_ocr_output, ocr_keep)
        return torch.cat([fixed_scores, dynamic_ocr_scores], dim=-1)


def m4c_decoding_bce_with_mask_loss(scores, targets, loss_mask):
    losses = F.binary_cross_entropy_with_logits(scores, targets, reduction="none")
    return (losses * loss_mask[..., None]).sum() / loss_mask.sum().clamp(min=1.0)


def build_answer_targets(answers, ocr_tokens, num_vocab):
    b = len(answers)
    targets = torch.zeros(b, MAX_DEC, num_vocab + 6)
    prev_inds = torch.zeros(b, MAX_DEC, dtype=torch.long)
    loss_mask = torch.zeros(b, MAX_DEC)
    for i, (answer, toks) in enumerate(zip(answers, ocr_tokens)):
        words = answer.split()[: MAX_DEC - 1] + ["</s>"]
        prev_inds[i, 0] = ANSWER_VOCAB.index("<s>")
        for t, w in enumerate(words):
            idx = num_vocab + toks.index(w) if w in toks else ANSWER_VOCAB.index(w) if w in ANSWER_VOCAB else 3
            targets[i, t, idx] = 1.0
            loss_mask[i, t] = 1.0
            if t + 1 < MAX_DEC:
                prev_inds[i, t + 1] = idx
    return targets, prev_inds, loss_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    questions = ["what brand is the bottle", "what does the red sign say"]
    ocr_tokens = [["coca", "cola", "500ml"], ["stop", "ahead", "slow", "school", "zone", "25"]]
    ocr_boxes = [[(0.1, 0.2, 0.3, 0.3), (0.3, 0.2, 0.5, 0.3), (0.1, 0.6, 0.2, 0.7)], [(0.1 * j, 0.1, 0.1 * j + 0.1, 0.2) for j in range(6)]]
    sample_list = {
        "question": QuestionTokenizer()(questions),
        "obj": {"features": torch.randn(2, 5, 64), "boxes": torch.rand(2, 5, 4), "num_boxes": torch.tensor([5, 3])},
        "ocr": OcrTokenProcessor()(ocr_tokens, ocr_boxes),
    }
    targets, sample_list["prev_inds"], loss_mask = build_answer_targets(["coca cola", "stop"], ocr_tokens, len(ANSWER_VOCAB))
    model = M4C()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        scores = model(sample_list)
        loss = m4c_decoding_bce_with_mask_loss(scores, targets, loss_mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    print("step-0 prediction", scores[:, 0].argmax(-1).tolist())
