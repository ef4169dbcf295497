"""DNABERT: k-mer BERT pre-training on DNA with contiguous k-mer span masking.

Written after jerryji1993/DNABERT (src/transformers/tokenization_dna.py: ``seq2kmer``
and a vocabulary of the 4^k k-mers after the five special tokens; examples/run_pretrain.py:
``mask_tokens`` hiding the k overlapping k-mers around each chosen position) and
transformers' modeling_bert.py (BertEmbeddings, BertSelfAttention, BertLayer,
ModuleUtilsMixin.get_extended_attention_mask, BertForMaskedLM).

Source: pytorch/pytorch#103963, huggingface/transformers#32195, conventions.md §2.9, tools.md §0 P1.
"""
import itertools
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def seq2kmer(seq, k):
    return " ".join(seq[x : x + k] for x in range(len(seq) + 1 - k))


class DNATokenizer:
    special_tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

    def __init__(self, k=6):
        self.k = k
        kmers = ["".join(p) for p in itertools.product("ACGT", repeat=k)]
        self.vocab = {tok: i for i, tok in enumerate(self.special_tokens + kmers)}
        self.pad_token_id, self.unk_token_id = 0, 1
        self.cls_token_id, self.sep_token_id, self.mask_token_id = 2, 3, 4

    def __len__(self):
        return len(self.vocab)

    def __call__(self, sequences, max_length=128):
        input_ids, attention_mask = [], []
        for seq in sequences:
            kmers = seq2kmer(seq.upper(), self.k).split()[: max_length - 2]
            ids = [self.cls_token_id] + [self.vocab.get(t, self.unk_token_id) for t in kmers] + [self.sep_token_id]
            input_ids.append(ids)
        longest = max(len(ids) for ids in input_ids)
        for ids in input_ids:
            attention_mask.append([1] * len(ids) + [0] * (longest - len(ids)))
            ids.extend([self.pad_token_id] * (longest - len(ids)))
        return {"input_ids": torch.tensor(input_ids), "attention_mask": torch.tensor(attention_mask)}


class ModuleUtilsMixin:
    def get_extended_attention_mask(self, attention_mask, input_shape, dtype=torch.float32):
        if attention_mask.dim() == 3:
            extended_attention_mask = attention_mask[:, None, :, :]
        elif attention_mask.dim() == 2:
            extended_attention_mask = attention_mask[:, None, None, :]
        else:
            raise ValueError(f"Wrong shape for input_ids (shape {input_shape}) or attention_mask (shape {attention_mask.shape})")
        extended_attention_mask = (1.0 - extended_attention_mask.to(dtype=dtype)) * torch.finfo(dtype).min
        return extended_attention_mask


@dataclass
class BertConfig:
    vocab_size: int = 4101
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 512
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids):
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        embeddings = embeddings + self.token_type_embeddings(torch.zeros_like(input_ids))
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (-1,))


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None):
        attn = self.attention_output(self.attention(hidden_states, attention_mask=attention_mask))
        hidden_states = self.attention_norm(hidden_states + attn)
        return self.output_norm(hidden_states + self.output(F.gelu(self.intermediate(hidden_states))))


class BertForMaskedLM(nn.Module, ModuleUtilsMixin):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        self.transform = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.GELU(),
                                       nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps))
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids, attention_mask=None, labels=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden_states = self.embeddings(input_ids)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, input_ids.shape, hidden_states.dtype)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask=extended_attention_mask)
        prediction_scores = self.decoder(self.transform(hidden_states))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(prediction_scores.view(-1, self.config.vocab_size), labels.view(-1))
        return {"loss": loss, "logits": prediction_scores}


def mask_tokens(inputs, tokenizer, mlm_probability=0.025, generator=None):
    """DNABERT masking: each chosen k-mer hides the k overlapping k-mers centred on it."""
    labels = inputs.clone()
    special = (inputs == tokenizer.pad_token_id) | (inputs == tokenizer.cls_token_id) | (inputs == tokenizer.sep_token_id)
    centers = torch.bernoulli(torch.full(inputs.shape, mlm_probability), generator=generator).bool() & ~special
    half = tokenizer.k // 2
    masked_indices = centers.clone()
    for offset in range(-half, tokenizer.k - half):
        masked_indices |= torch.roll(centers, shifts=offset, dims=1)
    masked_indices &= ~special
    labels[~masked_indices] = -100
    replaced = torch.bernoulli(torch.full(inputs.shape, 0.8), generator=generator).bool() & masked_indices
    inputs = inputs.masked_fill(replaced, tokenizer.mask_token_id)
    random_words = torch.randint(5, len(tokenizer), inputs.shape, generator=generator)
    randomized = torch.bernoulli(torch.full(inputs.shape, 0.5), generator=generator).bool() & masked_indices & ~replaced
    return torch.where(randomized, random_words, inputs), labels


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = DNATokenizer(k=6)
    genome = "".join(rng.choice("ACGT") for _ in range(20000))
    reads = [genome[s : s + rng.randint(40, 120)] for s in (rng.randint(0, 19800) for _ in range(256))]
    model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=0.01)
    for step in range(30):
        batch = tokenizer(reads[(step * 8) % 256 : (step * 8) % 256 + 8])
        batch["input_ids"], batch["labels"] = mask_tokens(batch["input_ids"], tokenizer)
        out = model(**batch)
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} mlm loss {out['loss'].item():.4f}")
    model.eval()
    with torch.no_grad():
        short, long = min(reads, key=len), max(reads, key=len)
        batched = model(**tokenizer([short, long]))["logits"][0]
        alone = model(**tokenizer([short]))["logits"][0]
        print("batched vs alone:", (batched[: alone.shape[0]] - alone).abs().max().item())
