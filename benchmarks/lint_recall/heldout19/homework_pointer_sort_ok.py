"""Course homework: a pointer network (Vinyals et al., 2015) that learns to sort numbers (correct twin).

Starter-code layout of a typical deep-learning course assignment: an LSTM encoder over packed,
padded inputs, an `LSTMCell` decoder, Bahdanau-style pointer scores `v^T tanh(W1 e_j + W2 d_i)`,
teacher forcing while training and a greedy decoding loop, with an `available` bool mask (True =
element not yet pointed at) so that no element is chosen twice and padding is never chosen.
The student's solution inverts that mask with `1 - allowed`, the NumPy habit: torch refuses
subtraction on bool tensors, so the very first decoding step raises.

Twin: inverts the bool mask with `~allowed`.

Source: huggingface/transformers#32195 (the `1 - mask` inversion of a mask), #32113 (boolean masks
where 0/1 ones were expected); conventions.md §1 (HF 4.x AttentionMaskConverter row).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class PointerAttention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.W1 = nn.Linear(hidden_size, hidden_size, bias=False)
        self.W2 = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v = nn.Linear(hidden_size, 1, bias=False)

    def forward(self, enc, dec_h):
        # enc: (B, n, H), dec_h: (B, H) -> scores (B, n)
        return self.v(torch.tanh(self.W1(enc) + self.W2(dec_h).unsqueeze(1))).squeeze(-1)


class PointerNet(nn.Module):
    def __init__(self, hidden_size=64):
        super().__init__()
        self.embed = nn.Linear(1, hidden_size)
        self.encoder = nn.LSTM(hidden_size, hidden_size, batch_first=True)
        self.decoder = nn.LSTMCell(hidden_size, hidden_size)
        self.pointer = PointerAttention(hidden_size)
        self.start = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x, lengths, targets=None):
        """x: (B, n) padded numbers; lengths: (B,); targets: (B, n) indices, -100 past the end."""
        B, n = x.shape
        real = torch.arange(n)[None, :] < lengths[:, None]  # (B, n) True = real element
        emb = self.embed(x.unsqueeze(-1))
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        enc, (h, c) = self.encoder(packed)
        enc, _ = pad_packed_sequence(enc, batch_first=True, total_length=n)
        h, c = h[0], c[0]
        inp = self.start.expand(B, -1)
        available = real.clone()
        all_logits, picks = [], []
        for t in range(n):
            h, c = self.decoder(inp, (h, c))
            logits = self.pointer(enc, h)
            done = (lengths <= t)[:, None]  # finished sequences: any choice, the loss ignores it
            allowed = available | done
            logits = logits.masked_fill(~allowed, float("-inf"))
            all_logits.append(logits)
            if targets is not None:  # teacher forcing
                idx = targets[:, t].clamp(min=0)
            else:
                idx = logits.argmax(dim=-1)
            picks.append(idx)
            available = available.scatter(1, idx.unsqueeze(1), False)
            inp = emb[torch.arange(B), idx]
        return torch.stack(all_logits, dim=1), torch.stack(picks, dim=1)


def make_batch(batch_size=32, max_len=8, min_len=3):
    lengths = torch.randint(min_len, max_len + 1, (batch_size,))
    x = torch.zeros(batch_size, max_len)
    targets = torch.full((batch_size, max_len), -100, dtype=torch.long)
    for i, L in enumerate(lengths.tolist()):
        x[i, :L] = torch.rand(L)
        targets[i, :L] = torch.argsort(x[i, :L])
    return x, lengths, targets


def train(model, steps=200, lr=1e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        x, lengths, targets = make_batch()
        logits, _ = model(x, lengths, targets)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    return model


@torch.no_grad()
def evaluate(model, batches=5):
    model.eval()
    correct = total = repeats = 0
    for _ in range(batches):
        x, lengths, targets = make_batch()
        _, picks = model(x, lengths)
        for i, L in enumerate(lengths.tolist()):
            correct += int(torch.equal(picks[i, :L], targets[i, :L]))
            repeats += int(picks[i, :L].unique().numel() != L)
            total += 1
    return correct / total, repeats


if __name__ == "__main__":
    torch.manual_seed(0)
    model = train(PointerNet())
    acc, repeats = evaluate(model)
    print(f"exact-sort accuracy {acc:.2f}, tours that repeat an element: {repeats}")
