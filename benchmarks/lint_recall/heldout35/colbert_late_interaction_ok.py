"""ColBERT late-interaction retrieval: [Q]/[D] markers, query augmentation with [MASK], punctuation
skiplist, MaxSim scoring, n-way triples training and MRR@10 over a small collection; the BERT
encoder runs scaled_dot_product_attention.

Source: conventions.md §1 (SDPA row, direction cheat-sheet) and §5 item 1, rasbt/LLMs-from-scratch#1061
(conventions.md §3 item 14), seed self_attention_mask_guide.txt §2.
"""

import random
import string
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ColBERTConfig:
    query_maxlen: int = 12
    doc_maxlen: int = 32
    dim: int = 32
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    mask_punctuation: bool = True
    attend_to_mask_tokens: bool = False
    nway: int = 2


class WordPieceTokenizer:
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]

    def __init__(self, words):
        self.vocab = {t: i for i, t in enumerate(self.special + list(string.punctuation) + sorted(words))}
        self.pad_token_id, self.mask_token_id = self.vocab["[PAD]"], self.vocab["[MASK]"]

    def __call__(self, texts, max_length, padding="longest"):
        ids = []
        for text in texts:
            toks = text.replace(".", " . ").replace(",", " , ").split()
            ids.append([2, *(self.vocab.get(t, 1) for t in toks)][: max_length - 1] + [3])
        n = max_length if padding == "max_length" else max(len(x) for x in ids)
        input_ids = torch.tensor([x + [0] * (n - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


class QueryTokenizer:
    def __init__(self, config, tok):
        self.config, self.tok = config, tok
        self.Q_marker_token_id = tok.vocab["[unused0]"]

    def tensorize(self, batch_text):
        obj = self.tok([". " + x for x in batch_text], max_length=self.config.query_maxlen, padding="max_length")
        ids, mask = obj["input_ids"], obj["attention_mask"]
        ids[:, 1] = self.Q_marker_token_id
        ids[ids == self.tok.pad_token_id] = self.tok.mask_token_id
        if self.config.attend_to_mask_tokens:
            mask[ids == self.tok.mask_token_id] = 1
        return ids, mask


class DocTokenizer:
    def __init__(self, config, tok):
        self.config, self.tok = config, tok
        self.D_marker_token_id = tok.vocab["[unused1]"]

    def tensorize(self, batch_text):
        obj = self.tok([". " + x for x in batch_text], max_length=self.config.doc_maxlen)
        ids, mask = obj["input_ids"], obj["attention_mask"]
        ids[:, 1] = self.D_marker_token_id
        return ids, mask


class BertSdpaSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.output = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, attention_mask):
        bsz, seq_len, hidden = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(bsz, seq_len, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return self.output(context.transpose(1, 2).reshape(bsz, seq_len, hidden))


class BertLayer(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.attention = BertSdpaSelfAttention(hidden_size, num_heads)
        self.attention_norm = nn.LayerNorm(hidden_size)
        self.ffn = nn.Sequential(nn.Linear(hidden_size, 4 * hidden_size), nn.GELU(), nn.Linear(4 * hidden_size, hidden_size))
        self.output_norm = nn.LayerNorm(hidden_size)

    def forward(self, hidden_states, attention_mask):
        hidden_states = self.attention_norm(hidden_states + self.attention(hidden_states, attention_mask))
        return self.output_norm(hidden_states + self.ffn(hidden_states))


class BertModel(nn.Module):
    def __init__(self, vocab_size, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(64, config.hidden_size)
        self.embeddings_norm = nn.LayerNorm(config.hidden_size)
        self.layers = nn.ModuleList([BertLayer(config.hidden_size, config.num_heads) for _ in range(config.num_layers)])

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden_states = self.embeddings_norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))
        extended_attention_mask = attention_mask.ne(0).unsqueeze(1).unsqueeze(2)
        for layer in self.layers:
            hidden_states = layer(hidden_states, extended_attention_mask)
        return (hidden_states,)


class ColBERT(nn.Module):
    def __init__(self, config, tok):
        super().__init__()
        self.config = config
        self.bert = BertModel(len(tok.vocab), config)
        self.linear = nn.Linear(config.hidden_size, config.dim, bias=False)
        self.pad_token = tok.pad_token_id
        self.skiplist = {tok.vocab[p]: True for p in string.punctuation} if config.mask_punctuation else {}

    def forward(self, Q, D):
        Q = self.query(*Q)
        D, D_mask = self.doc(*D)
        Q_duplicated = Q.repeat_interleave(self.config.nway, dim=0).contiguous()
        return self.score(Q_duplicated, D, D_mask)

    def mask(self, input_ids, skiplist):
        return [[(x not in skiplist) and (x != self.pad_token) for x in d] for d in input_ids.cpu().tolist()]

    def query(self, input_ids, attention_mask):
        Q = self.linear(self.bert(input_ids, attention_mask=attention_mask)[0])
        mask = torch.tensor(self.mask(input_ids, skiplist=[]), device=Q.device).unsqueeze(2).float()
        return F.normalize(Q * mask, p=2, dim=2)

    def doc(self, input_ids, attention_mask):
        D = self.linear(self.bert(input_ids, attention_mask=attention_mask)[0])
        mask = torch.tensor(self.mask(input_ids, skiplist=self.skiplist), device=D.device).unsqueeze(2).float()
        return F.normalize(D * mask, p=2, dim=2), mask.bool()

    @staticmethod
    def score(Q, D_padded, D_mask):
        scores = D_padded @ Q.to(dtype=D_padded.dtype).permute(0, 2, 1)
        D_padding = ~D_mask.view(scores.size(0), scores.size(1)).bool()
        scores[D_padding] = -9999
        return scores.max(1).values.sum(-1)


def make_collection(rng, topics, n_docs):
    docs = []
    for i in range(n_docs):
        words = rng.sample(topics[i % len(topics)], rng.randint(4, 9)) + rng.sample(topics[(i + 1) % len(topics)], 2)
        docs.append(", ".join(" ".join(words[j : j + 3]) for j in range(0, len(words), 3)) + ".")
    return docs


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    vocab = [f"t{i}" for i in range(120)]
    topics = [vocab[i : i + 12] for i in range(0, 120, 12)]
    config = ColBERTConfig()
    tok = WordPieceTokenizer(vocab)
    query_tokenizer, doc_tokenizer = QueryTokenizer(config, tok), DocTokenizer(config, tok)
    colbert = ColBERT(config, tok)
    optimizer = torch.optim.AdamW(colbert.parameters(), lr=1e-3)
    for step in range(150):
        docs = make_collection(rng, topics, 32)
        queries = [" ".join(rng.sample(d.replace(",", "").replace(".", "").split(), 3)) for d in docs[:16]]
        triples = [(docs[i], docs[(i + 5) % 16]) for i in range(16)]
        D = doc_tokenizer.tensorize([d for pair in triples for d in pair])
        scores = colbert(query_tokenizer.tensorize(queries), D).view(-1, config.nway)
        loss = F.cross_entropy(scores, torch.zeros(len(queries), dtype=torch.long))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    colbert.eval()
    collection = make_collection(random.Random(1), topics, 40)
    queries = [" ".join(random.Random(i).sample(d.replace(",", "").replace(".", "").split(), 3)) for i, d in enumerate(collection)]
    with torch.no_grad():
        D, D_mask = colbert.doc(*doc_tokenizer.tensorize(collection))
        Q = colbert.query(*query_tokenizer.tensorize(queries))
        scores = torch.stack([ColBERT.score(q.expand(len(collection), -1, -1), D, D_mask) for q in Q])
        ranks = (scores > scores.diagonal()[:, None]).sum(1) + 1
        print("MRR@10:", round(torch.where(ranks <= 10, 1.0 / ranks, 0.0).mean().item(), 3))
        alone, _ = colbert.doc(*doc_tokenizer.tensorize(collection[:1]))
        print("doc 0 batched vs alone:", (D[0, : alone.size(1)] - alone[0]).abs().max().item())
