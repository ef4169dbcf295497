"""Joint intent classification and slot filling for in-car voice commands.

A PyTorch port of GluonNLP's BERT intent / slot example (scripts/intent_cls_slot:
BERTForICSL over gluonnlp.model.BERTEncoder), kept close to the MXNet code: `valid_length`
arguments instead of masks, `gen_self_attn_mask`, a `SequenceMask` for the slot loss and the
`masked_softmax` of DotProductAttentionCell. Utterances are generated from templates of an
infotainment unit (temperature, navigation, media, phone, windows).

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md 3.18)
"""

import copy
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

INTENTS = ["set_temperature", "navigate_to", "play_artist", "call_contact", "open_window"]
SLOTS = ["O", "B-temp", "B-place", "I-place", "B-artist", "B-contact", "B-window"]
PLACES = [("main", "station"), ("city", "airport"), ("north", "garage"), ("old", "harbour")]
ARTISTS = ["adele", "queen", "abba", "muse", "blur"]
CONTACTS = ["mum", "anna", "office", "tom"]
WINDOWS = ["driver", "passenger", "rear"]
PAD, CLS, SEP = "[PAD]", "[CLS]", "[SEP]"


def make_utterance(rng):
    intent = rng.randrange(len(INTENTS))
    if intent == 0:
        words, tags = ["set", "the", "temperature", "to", str(rng.randint(16, 28)), "degrees"], [0, 0, 0, 0, 1, 0]
    elif intent == 1:
        place = rng.choice(PLACES)
        words, tags = ["navigate", "to", "the", *place], [0, 0, 0, 2, 3]
    elif intent == 2:
        words, tags = ["play", "something", "by", rng.choice(ARTISTS)], [0, 0, 0, 4]
    elif intent == 3:
        words, tags = ["please", "call", rng.choice(CONTACTS)], [0, 0, 5]
    else:
        words, tags = ["open", "the", rng.choice(WINDOWS), "window"], [0, 0, 6, 0]
    return words, tags, intent


def build_vocab():
    words = ["set", "the", "temperature", "to", "degrees", "navigate", "play", "something", "by",
             "please", "call", "open", "window"] + [str(t) for t in range(16, 29)]
    words += [w for p in PLACES for w in p] + ARTISTS + CONTACTS + WINDOWS
    return {w: i for i, w in enumerate([PAD, CLS, SEP] + sorted(set(words)))}


def batchify(samples, vocab):
    max_len = max(len(w) for w, _, _ in samples) + 2
    ids = torch.zeros(len(samples), max_len, dtype=torch.long)
    tags = torch.zeros(len(samples), max_len, dtype=torch.long)
    valid_length = torch.zeros(len(samples), dtype=torch.long)
    for i, (words, slot_tags, _) in enumerate(samples):
        tokens = [CLS] + words + [SEP]
        ids[i, :len(tokens)] = torch.tensor([vocab[t] for t in tokens])
        tags[i, 1:len(words) + 1] = torch.tensor(slot_tags)
        valid_length[i] = len(tokens)
    intents = torch.tensor([intent for _, _, intent in samples])
    return ids, torch.zeros_like(ids), valid_length, tags, intents


def sequence_mask(data, valid_length, value=0.0):
    steps = torch.arange(data.shape[1], device=data.device)
    keep = steps[None, :] < valid_length[:, None]
    return data.masked_fill(~keep, value)


def gen_self_attn_mask(valid_length, length):
    steps = torch.arange(length, device=valid_length.device)
    valid = steps[None, :] < valid_length[:, None]
    return valid[:, None, :].expand(-1, length, -1)


def masked_softmax(att_score, mask):
    att_score = att_score.masked_fill(~mask, -1e18)  # expect: MC501 helper
    return torch.softmax(att_score, dim=-1) * mask


class DotProductAttentionCell(nn.Module):
    def __init__(self, units, num_heads, dropout):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, units // num_heads
        self.proj_query = nn.Linear(units, units)
        self.proj_key = nn.Linear(units, units)
        self.proj_value = nn.Linear(units, units)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x):
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self._split(self.proj_query(x)), self._split(self.proj_key(x)), self._split(self.proj_value(x))
        att_score = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        att_weights = self.dropout(masked_softmax(att_score, mask[:, None]))
        out = (att_weights @ v).transpose(1, 2)
        return out.reshape(x.shape[0], x.shape[1], -1)


class BERTEncoderCell(nn.Module):
    def __init__(self, units, hidden_size, num_heads, dropout):
        super().__init__()
        self.attention_cell = DotProductAttentionCell(units, num_heads, dropout)
        self.proj = nn.Linear(units, units)
        self.ffn = nn.Sequential(nn.Linear(units, hidden_size), nn.GELU(), nn.Linear(hidden_size, units))
        self.layer_norm = nn.LayerNorm(units, eps=1e-12)
        self.ffn_layer_norm = nn.LayerNorm(units, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, inputs, mask):
        outputs = self.layer_norm(inputs + self.dropout(self.proj(self.attention_cell(inputs, mask))))
        return self.ffn_layer_norm(outputs + self.dropout(self.ffn(outputs)))


class BERTForICSL(nn.Module):
    def __init__(self, vocab_size, units=64, hidden_size=128, num_heads=4, num_layers=2, dropout=0.1):
        super().__init__()
        self.word_embed = nn.Embedding(vocab_size, units)
        self.token_type_embed = nn.Embedding(2, units)
        self.position_weight = nn.Parameter(torch.randn(64, units) * 0.02)
        self.embed_layer_norm = nn.LayerNorm(units, eps=1e-12)
        self.transformer_cells = nn.ModuleList(
            BERTEncoderCell(units, hidden_size, num_heads, dropout) for _ in range(num_layers))
        self.pooler = nn.Linear(units, units)
        self.intent_classifier = nn.Linear(units, len(INTENTS))
        self.slot_tagger = nn.Linear(units, len(SLOTS))

    def forward(self, inputs, token_types, valid_length):
        length = inputs.shape[1]
        x = self.word_embed(inputs) + self.token_type_embed(token_types) + self.position_weight[:length]
        x = self.embed_layer_norm(x)
        mask = gen_self_attn_mask(valid_length, length)
        for cell in self.transformer_cells:
            x = cell(x, mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.intent_classifier(pooled), self.slot_tagger(x)


def icsl_loss(intent_scores, slot_scores, intents, tags, valid_length):
    intent_loss = F.cross_entropy(intent_scores, intents)
    token_loss = F.cross_entropy(slot_scores.transpose(1, 2), tags, reduction="none")
    token_loss = sequence_mask(token_loss, valid_length)
    return intent_loss + token_loss.sum() / valid_length.sum()


def export_for_head_unit(model):
    return copy.deepcopy(model).half().eval()


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    vocab = build_vocab()
    model = BERTForICSL(len(vocab))
    trainer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(120):
        ids, types, valid_length, tags, intents = batchify([make_utterance(rng) for _ in range(32)], vocab)
        intent_scores, slot_scores = model(ids, types, valid_length)
        loss = icsl_loss(intent_scores, slot_scores, intents, tags, valid_length)
        trainer.zero_grad()
        loss.backward()
        trainer.step()
    ids, types, valid_length, tags, intents = batchify([make_utterance(rng) for _ in range(200)], vocab)
    model.eval()
    with torch.no_grad():
        intent_scores, slot_scores = model(ids, types, valid_length)
    keep = sequence_mask(torch.ones_like(tags), valid_length).bool()
    print("intent acc %.3f" % (intent_scores.argmax(-1) == intents).float().mean())
    print("slot acc %.3f" % (slot_scores.argmax(-1) == tags)[keep].float().mean())
    deployed = export_for_head_unit(model)
    with torch.no_grad():
        intent_scores, _ = deployed(ids, types, valid_length)
    print("fp16 intent acc %.3f" % (intent_scores.argmax(-1) == intents).float().mean())


if __name__ == "__main__":
    main()
