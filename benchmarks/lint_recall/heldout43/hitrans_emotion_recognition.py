"""Emotion recognition in conversation with a hierarchical transformer (HiTrans).

Follows HiTrans (Li et al., COLING 2020): a low-level transformer encodes every utterance and
keeps its [CLS] vector, a high-level transformer relates the utterances of a dialogue, an emotion
classifier labels each utterance and the auxiliary pairwise speaker verification (PSV) task asks
whether two utterances share a speaker. MELD-like synthetic dialogues of 3-12 turns between two or
three speakers, seven emotions, weighted F1.

Source: pytorch/pytorch#103749, Biohub/esm#299 (conventions.md §3 items 5 and 22), conventions.md §2.3
"""
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

EMOTIONS = ["neutral", "joy", "sadness", "anger", "surprise", "fear", "disgust"]
CUES = {1: ["great", "love", "haha"], 2: ["sorry", "miss", "cry"], 3: ["stupid", "hate", "shut"],
        4: ["what", "really", "wow"], 5: ["scared", "afraid", "help"], 6: ["gross", "eww", "yuck"]}
FILLER = ["i", "you", "the", "it", "we", "that", "okay", "so", "know", "just", "going", "think", "yeah"]
PAD, CLS = 0, 1


@dataclass
class DialogueBatch:
    token_ids: torch.Tensor
    token_mask: torch.Tensor
    utt_mask: torch.Tensor
    speakers: torch.Tensor
    labels: torch.Tensor


def synth_dialogue(rng):
    n_speakers, n_turns = rng.choice([2, 3]), rng.randint(3, 12)
    mood = [rng.randrange(len(EMOTIONS)) for _ in range(n_speakers)]
    turns = []
    for _ in range(n_turns):
        spk = rng.randrange(n_speakers)
        if rng.random() < 0.25:
            mood[spk] = rng.randrange(len(EMOTIONS))
        words = rng.sample(FILLER, rng.randint(3, 7))
        if mood[spk] and rng.random() < 0.6:
            words.insert(rng.randrange(len(words)), rng.choice(CUES[mood[spk]]))
        turns.append((spk, words, mood[spk]))
    return turns


class Vocab:
    def __init__(self):
        words = FILLER + [w for ws in CUES.values() for w in ws]
        self.stoi = {w: i + 2 for i, w in enumerate(words)}

    def __len__(self):
        return len(self.stoi) + 2

    def collate(self, dialogues):
        n_utt = max(len(d) for d in dialogues)
        n_tok = max(len(w) for d in dialogues for _, w, _ in d) + 1
        token_ids = torch.full((len(dialogues), n_utt, n_tok), PAD, dtype=torch.long)
        token_ids[:, :, 0] = CLS
        speakers = torch.zeros(len(dialogues), n_utt, dtype=torch.long)
        labels = torch.full((len(dialogues), n_utt), -100, dtype=torch.long)
        for b, dialogue in enumerate(dialogues):
            for u, (spk, words, emo) in enumerate(dialogue):
                token_ids[b, u, 1:len(words) + 1] = torch.tensor([self.stoi[w] for w in words])
                speakers[b, u], labels[b, u] = spk, emo
        return DialogueBatch(token_ids, token_ids != PAD, labels != -100, speakers, labels)


class UtteranceEncoder(nn.Module):
    def __init__(self, vocab_size, d_model, n_layers=2, n_heads=4, max_len=16):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, 0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)

    def forward(self, token_ids, token_mask):
        B, U, W = token_ids.shape
        ids, keep = token_ids.view(B * U, W), token_mask.view(B * U, W)
        x = self.embed(ids) + self.pos(torch.arange(W, device=ids.device))
        x = self.encoder(x, src_key_padding_mask=~keep)
        return x[:, 0].view(B, U, -1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        B, U, D = x.shape
        q, k, v = self.qkv(x).view(B, U, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d_head)
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))  # expect: MC507 hitrans
        attn = self.dropout(F.softmax(scores, dim=-1))
        return self.out(torch.matmul(attn, v).transpose(1, 2).reshape(B, U, D))


class HighLevelLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x, mask):
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.ffn(x))


class HiTrans(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, max_utts=16):
        super().__init__()
        self.utterance_encoder = UtteranceEncoder(vocab_size, d_model)
        self.utt_pos = nn.Embedding(max_utts, d_model)
        self.layers = nn.ModuleList([HighLevelLayer(d_model, n_heads) for _ in range(n_layers)])
        self.emotion_head = nn.Linear(d_model, len(EMOTIONS))
        self.psv_head = nn.Sequential(nn.Linear(2 * d_model, d_model), nn.ReLU(), nn.Linear(d_model, 1))

    def forward(self, batch):
        h = self.utterance_encoder(batch.token_ids, batch.token_mask)
        h = h + self.utt_pos(torch.arange(h.size(1), device=h.device))
        pair_mask = batch.utt_mask.unsqueeze(2) & batch.utt_mask.unsqueeze(1)
        for layer in self.layers:
            h = layer(h, pair_mask)
        U = h.size(1)
        pairs = torch.cat([h.unsqueeze(2).expand(-1, -1, U, -1), h.unsqueeze(1).expand(-1, U, -1, -1)], -1)
        return self.emotion_head(h), self.psv_head(pairs).squeeze(-1), pair_mask


def loss_fn(model, batch, alpha=0.5):
    emo_logits, psv_logits, pair_mask = model(batch)
    emo_loss = F.cross_entropy(emo_logits.flatten(0, 1), batch.labels.flatten(), ignore_index=-100)
    same = (batch.speakers.unsqueeze(2) == batch.speakers.unsqueeze(1)).float()
    off_diag = ~torch.eye(pair_mask.size(1), dtype=torch.bool, device=pair_mask.device)
    valid = pair_mask & off_diag
    psv_loss = F.binary_cross_entropy_with_logits(psv_logits[valid], same[valid])
    return emo_loss + alpha * psv_loss, emo_logits


def weighted_f1(pred, gold):
    f1s, weights = [], []
    for c in range(len(EMOTIONS)):
        tp = ((pred == c) & (gold == c)).sum().item()
        fp, fn = ((pred == c) & (gold != c)).sum().item(), ((pred != c) & (gold == c)).sum().item()
        f1s.append(2 * tp / max(2 * tp + fp + fn, 1))
        weights.append((gold == c).sum().item())
    return sum(f * w for f, w in zip(f1s, weights)) / max(sum(weights), 1)


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    vocab = Vocab()
    train = [synth_dialogue(rng) for _ in range(2000)]
    test = [synth_dialogue(rng) for _ in range(300)]
    model = HiTrans(len(vocab))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(5):
        model.train()
        rng.shuffle(train)
        for start in range(0, len(train), 32):
            loss, _ = loss_fn(model, vocab.collate(train[start:start + 32]))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            batch = vocab.collate(test)
            _, logits = loss_fn(model, batch)
            keep = batch.labels != -100
            f1 = weighted_f1(logits.argmax(-1)[keep], batch.labels[keep])
        print(f"epoch {epoch} loss {loss.item():.3f} test weighted-F1 {f1:.3f}")


if __name__ == "__main__":
    main()
