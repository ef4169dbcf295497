"""Universal POS tagging of an Irish treebank in CoNLL-U.

A PyTorch port of the Flax example examples/nlp_seq (models.py, input_pipeline.py, train.py):
a `TransformerConfig` dataclass, `AddPositionEmbs`, `MlpBlock`, `Encoder1DBlock` and a
`Transformer` over word ids whose padding is id 0, the attention mask of
`nn.make_attention_mask(inputs > 0, inputs > 0)`, Flax's `dot_product_attention_weights`, and
`compute_weighted_cross_entropy` / `compute_weighted_accuracy` with weights from
`targets > 0`. The sentences are generated as CoNLL-U and read back with the example's parser;
"an" is a determiner inside a clause and the interrogative particle at its start.

Source: pytorch/pytorch#103749, Biohub/esm#299 (conventions.md 3.5, 3.22); conventions.md 1 (JAX / Flax row)
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

LEXICON = {"VERB": ["chonaic", "rinne", "fuair", "bhris"], "NOUN": ["fear", "bean", "madra", "teach", "bád"],
           "ADJ": ["mór", "beag", "nua", "dubh"], "ADP": ["ag", "ar", "le", "do"], "PRON": ["sé", "sí", "siad"]}
TEMPLATES = [["VERB", "DET", "NOUN", "ADJ", "ADP", "DET", "NOUN", "PUNCT"], ["PART", "VERB", "PRON", "DET", "NOUN", "PUNCT"],
             ["VERB", "PRON", "DET", "NOUN", "PUNCT"], ["VERB", "DET", "NOUN", "ADP", "PRON", "ADJ", "PUNCT"]]
UPOS = ["<pad>", "VERB", "NOUN", "ADJ", "ADP", "PRON", "DET", "PART", "PUNCT"]


@dataclass
class TransformerConfig:
    vocab_size: int
    output_vocab_size: int
    emb_dim: int = 64
    num_heads: int = 4
    num_layers: int = 2
    qkv_dim: int = 64
    mlp_dim: int = 128
    max_len: int = 64
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1


def generate_conllu(n, rng):
    sentences = []
    for s in range(n):
        tags = rng.choice(TEMPLATES)
        words = ["an" if t in ("DET", "PART") else ("?" if tags[0] == "PART" else ".") if t == "PUNCT"
                 else rng.choice(LEXICON[t]) for t in tags]
        lines = [f"# sent_id = synth-{s}"] + [f"{i + 1}\t{w}\t_\t{t}\t_\t_\t_\t_\t_\t_" for i, (w, t) in enumerate(zip(words, tags))]
        sentences.append("\n".join(lines))
    return "\n\n".join(sentences) + "\n"


def read_conllu(text):
    sentences, current = [], []
    for line in text.splitlines():
        if not line.strip():
            if current:
                sentences.append(current)
            current = []
        elif not line.startswith("#"):
            fields = line.split("\t")
            current.append((fields[1], fields[3]))
    if current:
        sentences.append(current)
    return sentences


def sentence_dataset(sentences, vocab):
    length = max(map(len, sentences))
    inputs = torch.zeros(len(sentences), length, dtype=torch.long)
    targets = torch.zeros(len(sentences), length, dtype=torch.long)
    for i, sentence in enumerate(sentences):
        inputs[i, :len(sentence)] = torch.tensor([vocab.get(w, 1) for w, _ in sentence])
        targets[i, :len(sentence)] = torch.tensor([UPOS.index(t) for _, t in sentence])
    return inputs, targets


def make_attention_mask(query_input, key_input, pairwise_fn=torch.mul, dtype=torch.float32):
    mask = pairwise_fn(query_input[..., :, None], key_input[..., None, :])
    return mask[:, None].to(dtype)


class AddPositionEmbs(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.randn(1, config.max_len, config.emb_dim) * 0.02)

    def forward(self, inputs):
        return inputs + self.pos_embedding[:, :inputs.shape[1]]


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.emb_dim, 3 * config.qkv_dim)
        self.out = nn.Linear(config.qkv_dim, config.emb_dim)
        self.dropout = nn.Dropout(config.attention_dropout_rate)

    def forward(self, x, mask):
        b, n, _ = x.shape
        heads, head_dim = self.config.num_heads, self.config.qkv_dim // self.config.num_heads
        query, key, value = self.qkv(x).view(b, n, 3, heads, head_dim).permute(2, 0, 3, 1, 4)

        def dot_product_attention_weights(q, k):
            attn_weights = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
            attn_weights = attn_weights.masked_fill(mask == 0, torch.finfo(attn_weights.dtype).min)
            return self.dropout(torch.softmax(attn_weights, dim=-1))

        out = dot_product_attention_weights(query, key) @ value
        return self.out(out.transpose(1, 2).reshape(b, n, -1))


class Encoder1DBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.emb_dim), nn.LayerNorm(config.emb_dim)
        self.attention = SelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(config.emb_dim, config.mlp_dim), nn.GELU(), nn.Dropout(config.dropout_rate),
                                 nn.Linear(config.mlp_dim, config.emb_dim), nn.Dropout(config.dropout_rate))
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, inputs, encoder_mask):
        x = inputs + self.dropout(self.attention(self.ln1(inputs), encoder_mask))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.emb_dim)
        self.add_position_embs = AddPositionEmbs(config)
        self.blocks = nn.ModuleList(Encoder1DBlock(config) for _ in range(config.num_layers))
        self.encoder_norm = nn.LayerNorm(config.emb_dim)
        self.logits_mixer = nn.Linear(config.emb_dim, config.output_vocab_size)

    def forward(self, inputs):
        padding_mask = (inputs > 0).float()[..., None]
        encoder_mask = make_attention_mask(inputs > 0, inputs > 0)
        x = self.add_position_embs(self.embed(inputs)) * padding_mask
        for block in self.blocks:
            x = block(x, encoder_mask)
        return self.logits_mixer(self.encoder_norm(x))


def compute_weighted_cross_entropy(logits, targets, weights):
    loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none") * weights
    return loss.sum() / weights.sum()


def compute_weighted_accuracy(logits, targets, weights):
    return ((logits.argmax(-1) == targets).float() * weights).sum() / weights.sum()


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    train_sentences = read_conllu(generate_conllu(2000, rng))
    eval_sentences = read_conllu(generate_conllu(300, rng))
    words = sorted({w for s in train_sentences for w, _ in s})
    vocab = {w: i + 2 for i, w in enumerate(words)}
    config = TransformerConfig(vocab_size=len(vocab) + 2, output_vocab_size=len(UPOS))
    model = Transformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(200):
        inputs, targets = sentence_dataset(rng.sample(train_sentences, 32), vocab)
        weights = (targets > 0).float()
        loss = compute_weighted_cross_entropy(model(inputs), targets, weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    inputs, targets = sentence_dataset(eval_sentences, vocab)
    with torch.no_grad():
        logits = model(inputs)
    weights = (targets > 0).float()
    print("train loss %.3f  eval accuracy %.3f" % (loss.item(), compute_weighted_accuracy(logits, targets, weights)))


if __name__ == "__main__":
    main()
