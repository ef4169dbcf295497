"""Reward model for chat transcripts: a chat template renders role-tagged turns into one
sequence, returns `input_ids`, an int64 `attention_mask` and an `assistant_masks` marking the
reply tokens, and a batch-first nn.MultiheadAttention encoder pools over the assistant reply.

Source: conventions.md §1 (HF 2-D attention_mask row) and §5 item 7, tools.md §0 P2
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, HEADS = 60, 32, 4
PAD, SYSTEM, USER, ASSISTANT, END = 0, 1, 2, 3, 4


def apply_chat_template(conversations):
    rendered = []
    for conv in conversations:
        ids, reply = [], []
        for role, toks in conv:
            seg = [role] + toks + [END]
            ids += seg
            reply += [int(role == ASSISTANT)] * len(seg)
        rendered.append((ids, reply))
    width = max(len(ids) for ids, _ in rendered)
    return {
        "input_ids": torch.tensor([ids + [PAD] * (width - len(ids)) for ids, _ in rendered]),
        "attention_mask": torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rendered]),
        "assistant_masks": torch.tensor([r + [0] * (width - len(r)) for _, r in rendered]),
    }


class RewardModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.pos = nn.Embedding(64, DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.norm = nn.LayerNorm(DIM)
        self.value = nn.Linear(DIM, 1)

    def forward(self, batch):
        ids = batch["input_ids"]
        x = self.embed(ids) + self.pos(torch.arange(ids.shape[1]))
        padding = batch["attention_mask"] == 0
        h, _ = self.attn(x, x, x, key_padding_mask=padding.bool())
        h = self.norm(x + h)
        reply = batch["assistant_masks"].unsqueeze(-1).to(h.dtype)
        pooled = (h * reply).sum(1) / reply.sum(1).clamp(min=1.0)
        return self.value(pooled).squeeze(-1)


if __name__ == "__main__":
    model = RewardModel().eval()
    convs = [
        [(SYSTEM, [10, 11]), (USER, [20, 21, 22]), (ASSISTANT, [30, 31, 32, 33])],
        [(USER, [23, 24]), (ASSISTANT, [34, 35])],
        [(SYSTEM, [12]), (USER, [25]), (ASSISTANT, [36, 37, 38]), (USER, [26]), (ASSISTANT, [39])],
    ]
    with torch.no_grad():
        rewards = model(apply_chat_template(convs))
        alone = torch.cat([model(apply_chat_template([c])) for c in convs])
    print("rewards batched:", rewards.tolist())
    print("rewards alone:  ", alone.tolist())
    print("preferred reply:", int(rewards[:2].argmax()))
