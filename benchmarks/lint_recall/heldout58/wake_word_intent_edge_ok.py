"""Voice-assistant front end for a smart speaker: wake word, then intent, run in float16 on the NPU.

Two models share the device. A small convolutional detector listens to 1-second log-mel
windows for the wake word; once it fires, the on-device recogniser's word pieces for the
utterance are passed to an intent classifier (a two-layer transformer encoder with slot
tagging). Both are trained in float32 on the server, then cast to float16 and traced into
the edge bundle that the speaker firmware loads.

Source: NVIDIA/apex#1052, huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19), §2.3
"""

import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

INTENTS = ["play_music", "set_timer", "weather", "lights_on", "lights_off", "volume_up", "volume_down", "stop"]
SLOTS = ["O", "B-duration", "I-duration", "B-artist", "I-artist", "B-room", "I-room"]
PAD_PIECE = 0


class WakeWordDetector(nn.Module):
    def __init__(self, n_mels=40):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(n_mels, 64, 3, padding=1), nn.BatchNorm1d(64), nn.ReLU(),
            nn.Conv1d(64, 64, 3, padding=2, dilation=2), nn.BatchNorm1d(64), nn.ReLU(),
            nn.AdaptiveMaxPool1d(1), nn.Flatten(), nn.Linear(64, 1),
        )

    def forward(self, log_mel):
        return self.net(log_mel).squeeze(-1)


class IntentEncoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def attend(self, x, piece_keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(~piece_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x, piece_keep):
        x = self.n1(x + self.attend(x, piece_keep))
        return self.n2(x + self.ff(x))


class IntentModel(nn.Module):
    def __init__(self, vocab=2000, dim=96, heads=4, layers=2, max_pieces=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD_PIECE)
        self.pos = nn.Parameter(torch.zeros(1, max_pieces, dim))
        self.layers = nn.ModuleList(IntentEncoderLayer(dim, heads) for _ in range(layers))
        self.intent = nn.Linear(dim, len(INTENTS))
        self.slots = nn.Linear(dim, len(SLOTS))

    def forward(self, pieces):
        piece_keep = pieces != PAD_PIECE
        x = self.embed(pieces) + self.pos[:, : pieces.size(1)]
        for layer in self.layers:
            x = layer(x, piece_keep)
        weight = piece_keep.unsqueeze(-1).to(x.dtype)
        pooled = (x * weight).sum(1) / weight.sum(1).clamp(min=1.0)
        return self.intent(pooled), self.slots(x)


def synthetic_utterances(n, vocab=2000, max_pieces=32, generator=None):
    intents = torch.randint(0, len(INTENTS), (n,), generator=generator)
    lengths = torch.randint(3, max_pieces, (n,), generator=generator)
    pieces = torch.randint(100, vocab, (n, max_pieces), generator=generator)
    pieces[:, 0] = 10 + intents
    pieces = pieces.masked_fill(torch.arange(max_pieces)[None, :] >= lengths[:, None], PAD_PIECE)
    slots = torch.zeros(n, max_pieces, dtype=torch.long).masked_fill(pieces >= 1800, 3)
    return {"pieces": pieces[:, : int(lengths.max())], "intent": intents, "slots": slots[:, : int(lengths.max())]}


def train_intent(model, data, steps=200, batch=64, lr=2e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, data["pieces"].size(0), (batch,))
        pieces = data["pieces"][idx]
        intent_logits, slot_logits = model(pieces)
        slot_loss = F.cross_entropy(slot_logits[pieces != PAD_PIECE], data["slots"][idx][pieces != PAD_PIECE])
        loss = F.cross_entropy(intent_logits, data["intent"][idx]) + 0.5 * slot_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


@torch.no_grad()
def intent_accuracy(model, data):
    model.eval()
    logits, _ = model(data["pieces"])
    return (logits.float().argmax(-1) == data["intent"]).float().mean().item()


class EdgeBundle(nn.Module):
    def __init__(self, detector, intent_model, threshold):
        super().__init__()
        self.detector = detector
        self.intent_model = intent_model
        self.threshold = threshold

    def forward(self, log_mel, pieces):
        fired = torch.sigmoid(self.detector(log_mel)) > self.threshold
        intent_logits, slot_logits = self.intent_model(pieces)
        return fired, intent_logits.argmax(-1), slot_logits.argmax(-1)


def export_edge(detector, intent_model, path, threshold=0.8):
    bundle = EdgeBundle(detector.eval().half(), intent_model.eval().half(), threshold).eval()
    example = (torch.randn(1, 40, 101, dtype=torch.float16), torch.tensor([[12, 401, 77, PAD_PIECE]]))
    with torch.no_grad():
        bundle(*example)
        traced = torch.jit.trace(bundle, example)
    traced.save(path)
    with open(path + ".json", "w") as f:
        json.dump({"intents": INTENTS, "slots": SLOTS, "threshold": threshold, "dtype": "float16"}, f)
    return bundle


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", default="assistant_edge_fp16.pt")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train_set, test_set = synthetic_utterances(4000, generator=gen), synthetic_utterances(500, generator=gen)
    intent_model = IntentModel()
    print("loss", train_intent(intent_model, train_set, args.steps))
    print("fp32 intent accuracy", intent_accuracy(intent_model, test_set))
    bundle = export_edge(WakeWordDetector(), intent_model, args.out)
    print("fp16 intent accuracy", intent_accuracy(bundle.intent_model, test_set))


if __name__ == "__main__":
    main()
