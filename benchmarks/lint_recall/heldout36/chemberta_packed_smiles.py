"""ChemBERTa-style masked-language-model pretraining on SMILES, with sequence packing.

Written in the layout of seyonechithrananda/bert-loves-chemistry (ChemBERTa: a RoBERTa masked
language model over SMILES split by the regex of deepchem's `SmilesTokenizer`, special tokens
`<s>`, `<pad>`, `</s>`, `<unk>`, `<mask>`, and a `DataCollatorForLanguageModeling`-style
`torch_mask_tokens` with `special_tokens_mask`, 80/10/10 replacement and -100 labels), with the
transformers RoBERTa modules (`RobertaEmbeddings`, eager `RobertaSelfAttention` adding the
extended mask, `RobertaLayer`, `RobertaModel.get_extended_attention_mask` for 2-D masks and
4-D masks passed through as they are, `RobertaLMHead` tied to the word embeddings); short
molecules are packed several to a row, with positions restarting at each molecule.

Source: seed self_attention_mask_guide.txt §6; conventions.md §1 (direction cheat-sheet) and
§2.9.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SMI_REGEX_PATTERN = (
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$"
    r"|\%[0-9]{2}|[0-9])"
)
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
SMILES = [
    "CCO",
    "CC(=O)O",
    "c1ccccc1",
    "c1ccccc1O",
    "CC(=O)Oc1ccccc1C(=O)O",
    "CN1C=NC2=C1C(=O)N(C)C(=O)N2C",
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "C1CCCCC1",
    "OC(=O)CCC(=O)O",
    "NCCO",
    "CCN(CC)CC",
    "ClCCl",
    "c1ccncc1",
    "Cc1ccccc1",
    "O=C=O",
    "CC#N",
    "CCOC(=O)C",
    "C1=CC=CN=C1",
    "OCC(O)CO",
    "CCCCCC",
    "c1ccc2ccccc2c1",
    "CS(=O)C",
    "NC(=O)N",
    "CC(C)O",
    "Brc1ccccc1",
    "FC(F)(F)c1ccccc1",
]


class SmilesTokenizer:
    def __init__(self, corpus):
        self.regex = re.compile(SMI_REGEX_PATTERN)
        tokens = sorted({tok for smi in corpus for tok in self.regex.findall(smi)})
        self.vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tokens)}
        self.bos_token_id, self.pad_token_id, self.eos_token_id = 0, 1, 2
        self.unk_token_id, self.mask_token_id = 3, 4

    def encode(self, smiles):
        ids = [self.vocab.get(tok, self.unk_token_id) for tok in self.regex.findall(smiles)]
        return [self.bos_token_id, *ids, self.eos_token_id]


def pack_smiles(encoded, max_length, pad_token_id):
    rows, row = [], []
    for ids in sorted(encoded, key=len, reverse=True):
        if sum(map(len, row)) + len(ids) > max_length:
            rows.append(row)
            row = []
        row.append(ids)
    rows.append(row)
    input_ids = torch.full((len(rows), max_length), pad_token_id, dtype=torch.long)
    segment_ids = torch.zeros((len(rows), max_length), dtype=torch.long)
    position_ids = torch.full((len(rows), max_length), pad_token_id, dtype=torch.long)
    for b, molecules in enumerate(rows):
        start = 0
        for seg, ids in enumerate(molecules, start=1):
            end = start + len(ids)
            input_ids[b, start:end] = torch.tensor(ids)
            segment_ids[b, start:end] = seg
            position_ids[b, start:end] = torch.arange(len(ids)) + pad_token_id + 1
            start = end
    return input_ids, segment_ids, position_ids


def build_packed_attention_bias(segment_ids, dtype=torch.float32):
    bsz, seq_len = segment_ids.shape
    bias = torch.zeros(bsz, seq_len, seq_len, dtype=dtype)
    for b in range(bsz):
        for seg in segment_ids[b].unique():
            idx = (segment_ids[b] == seg).nonzero().squeeze(-1)
            start, end = int(idx[0]), int(idx[-1]) + 1
            bias[b, start:end, start:end] = 0
    bias[bias == 0] = float("-inf")  # expect: MC504 chemberta
    return bias[:, None, :, :]


class DataCollatorForPackedMLM:
    def __init__(self, tokenizer: SmilesTokenizer, max_length=64, mlm_probability=0.15):
        self.tokenizer, self.max_length, self.mlm_probability = (
            tokenizer,
            max_length,
            mlm_probability,
        )

    def torch_mask_tokens(self, inputs, generator):
        labels = inputs.clone()
        probability_matrix = torch.full(labels.shape, self.mlm_probability)
        special_tokens_mask = inputs <= self.tokenizer.eos_token_id
        probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
        masked_indices = torch.bernoulli(probability_matrix, generator=generator).bool()
        labels[~masked_indices] = -100
        replace = torch.bernoulli(torch.full(labels.shape, 0.8), generator=generator).bool()
        indices_replaced = replace & masked_indices
        inputs[indices_replaced] = self.tokenizer.mask_token_id
        random = torch.bernoulli(torch.full(labels.shape, 0.5), generator=generator).bool()
        indices_random = random & masked_indices & ~indices_replaced
        random_words = torch.randint(
            len(SPECIAL_TOKENS), len(self.tokenizer.vocab), labels.shape, generator=generator
        )
        inputs[indices_random] = random_words[indices_random]
        return inputs, labels

    def __call__(self, smiles_batch, generator):
        encoded = [self.tokenizer.encode(smi) for smi in smiles_batch]
        input_ids, segment_ids, position_ids = pack_smiles(
            encoded, self.max_length, self.tokenizer.pad_token_id
        )
        input_ids, labels = self.torch_mask_tokens(input_ids, generator)
        return {
            "input_ids": input_ids,
            "attention_mask": build_packed_attention_bias(segment_ids),
            "position_ids": position_ids,
            "labels": labels,
        }


@dataclass
class RobertaConfig:
    vocab_size: int = 64
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 130
    pad_token_id: int = 1
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1


class RobertaSelfAttention(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

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
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3)
        return context_layer.reshape(context_layer.size()[:-2] + (-1,))


class RobertaLayer(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.attention = RobertaSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask=None):
        attn = self.attention(hidden_states, attention_mask=attention_mask)
        hidden_states = self.attention_norm(
            self.dropout(self.attention_output(attn)) + hidden_states
        )
        ffn = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.output_norm(self.dropout(ffn) + hidden_states)


class RobertaModel(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, config.pad_token_id
        )
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.embeddings_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layer = nn.ModuleList(RobertaLayer(config) for _ in range(config.num_hidden_layers))

    @staticmethod
    def get_extended_attention_mask(attention_mask, dtype=torch.float32):
        extended_attention_mask = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended_attention_mask) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        if position_ids is None:
            mask = input_ids.ne(self.config.pad_token_id).int()
            position_ids = torch.cumsum(mask, dim=1) * mask + self.config.pad_token_id
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        hidden_states = self.dropout(self.embeddings_norm(embeddings))
        if attention_mask is not None and attention_mask.dim() == 2:
            attention_mask = self.get_extended_attention_mask(attention_mask, hidden_states.dtype)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask=attention_mask)
        return hidden_states


class RobertaForMaskedLM(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.roberta = RobertaModel(config)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.decoder.weight = self.roberta.word_embeddings.weight

    def forward(self, input_ids, attention_mask=None, position_ids=None, labels=None):
        sequence_output = self.roberta(
            input_ids, attention_mask=attention_mask, position_ids=position_ids
        )
        logits = self.decoder(self.layer_norm(F.gelu(self.dense(sequence_output))))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100
            )
        return loss, logits


def main():
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    tokenizer = SmilesTokenizer(SMILES)
    collator = DataCollatorForPackedMLM(tokenizer, max_length=64)
    model = RobertaForMaskedLM(RobertaConfig(vocab_size=len(tokenizer.vocab)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for step in range(60):
        order = torch.randperm(len(SMILES), generator=generator)[:16]
        batch = collator([SMILES[i] for i in order], generator)
        loss, _ = model(**batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} mlm loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        packed_ids, segment_ids, position_ids = pack_smiles(
            [tokenizer.encode(s) for s in SMILES[4:10]], 64, tokenizer.pad_token_id
        )
        packed = model.roberta(packed_ids, build_packed_attention_bias(segment_ids), position_ids)
        first = segment_ids[0] == 1
        alone_ids = packed_ids[:1, first]
        alone = model.roberta(alone_ids, attention_mask=torch.ones_like(alone_ids))
    print(f"molecule alone vs packed: {(packed[0, first] - alone[0]).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
