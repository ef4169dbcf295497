"""Behavior Sequence Transformer (BST) for movie ratings, ported from the Keras example to PyTorch.

The Keras model embeds the movies a user rated in order, runs one transformer block
(`layers.MultiHeadAttention` called with `attention_mask=`) over the history and the target
movie, and regresses the rating of the target. Helper names follow the TensorFlow original:
`sequence_mask` stands in for `tf.sequence_mask`, `inputs` is the dict the Keras model takes.

Source: conventions.md §1 (nn.MultiheadAttention and Keras 3 rows, direction cheat-sheet) and
§5 item 1, pytorch/pytorch PR #141694, seed self_attention_mask_guide.txt §2.
"""
import torch
import torch.nn as nn

PAD = 0


def sequence_mask(lengths, maxlen=None, dtype=torch.bool):
    if maxlen is None:
        maxlen = int(lengths.max())
    row = torch.arange(maxlen, device=lengths.device)
    return (row[None, :] < lengths[:, None]).to(dtype)


class TransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, ff_dim):
        super().__init__()
        self.mha = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.layernorm1 = nn.LayerNorm(dim, eps=1e-6)
        self.ffn = nn.Sequential(nn.Linear(dim, ff_dim), nn.GELU(), nn.Linear(ff_dim, dim))
        self.layernorm2 = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x, attention_mask):
        attn_out, _ = self.mha(x, x, x, key_padding_mask=attention_mask)  # expect: MC502 kerasmha
        x = self.layernorm1(x + attn_out)
        return self.layernorm2(x + self.ffn(x))


class BST(nn.Module):
    def __init__(self, num_movies, num_users, dim=16, num_heads=2, max_len=6):
        super().__init__()
        self.max_len = max_len
        self.movie_embedding = nn.Embedding(num_movies, dim, padding_idx=PAD)
        self.position_embedding = nn.Embedding(max_len + 1, dim)
        self.user_embedding = nn.Embedding(num_users, dim)
        self.block = TransformerBlock(dim, num_heads, 2 * dim)
        self.target_query = nn.Linear(dim, dim)
        self.head = nn.Sequential(nn.Linear(3 * dim, dim), nn.ReLU(), nn.Linear(dim, 1))

    def encode(self, inputs):
        history = inputs["sequence_movie_ids"]
        target = inputs["target_movie_id"]
        # history and target form one sequence, the target right after the last rated movie
        tokens = torch.cat([history, torch.full_like(target[:, None], PAD)], dim=1)
        tokens[torch.arange(len(target)), inputs["sequence_length"]] = target
        lengths = inputs["sequence_length"] + 1
        attention_mask = sequence_mask(lengths, maxlen=tokens.shape[1])
        positions = torch.arange(tokens.shape[1])[None, :].expand_as(tokens)
        x = self.movie_embedding(tokens) + self.position_embedding(positions)
        x = self.block(x, attention_mask)
        return x, attention_mask, lengths

    def forward(self, inputs):
        x, attention_mask, lengths = self.encode(inputs)
        weights = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(dim=1) / weights.sum(dim=1)
        target_state = x[torch.arange(x.shape[0]), lengths - 1]
        scores = torch.einsum("bd,btd->bt", self.target_query(target_state), x)
        scores = scores.masked_fill(~attention_mask, float("-inf"))
        attended = torch.einsum("bt,btd->bd", scores.softmax(dim=-1), x)
        user = self.user_embedding(inputs["user_id"])
        return self.head(torch.cat([pooled, attended, user], dim=-1)).squeeze(-1)


def make_inputs(histories, targets, users, max_len):
    ids = torch.full((len(histories), max_len), PAD, dtype=torch.long)
    for i, h in enumerate(histories):
        ids[i, : len(h)] = torch.tensor(h)
    return {
        "sequence_movie_ids": ids,
        "sequence_length": torch.tensor([len(h) for h in histories]),
        "target_movie_id": torch.tensor(targets),
        "user_id": torch.tensor(users),
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    model = BST(num_movies=40, num_users=5).eval()
    histories = [[3, 7, 9], [12, 5, 30, 2, 8, 17], [21]]
    targets, users = [4, 11, 6], [0, 1, 2]
    with torch.no_grad():
        batched = model(make_inputs(histories, targets, users, model.max_len))
        alone = torch.cat([
            model(make_inputs([h], [t], [u], len(h)))
            for h, t, u in zip(histories, targets, users)
        ])
    print("ratings batched:", [round(v, 4) for v in batched.tolist()])
    print("ratings alone:  ", [round(v, 4) for v in alone.tolist()])
    print("NaN ratings batched / alone:", int(torch.isnan(batched).sum()), int(torch.isnan(alone).sum()))
    both = ~torch.isnan(batched) & ~torch.isnan(alone)
    gap = (batched - alone)[both].abs().max().item() if both.any() else float("nan")
    print("max |batched - alone| where both are finite:", gap)
