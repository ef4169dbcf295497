"""Stress detection in Reddit posts (Dreaddit) by fine-tuning a MentalBERT-style encoder.

Imitates the MentalBERT fine-tuning setup (Ji et al., LREC 2022; the `mental/mental-bert-base-
uncased` checkpoint) as written with transformers' `run_glue_no_trainer.py` loop and the
`modeling_bert.py` SDPA layout: `BertConfig`, `BertEmbeddings`, `BertSdpaSelfAttention` with
`transpose_for_scores` on `F.scaled_dot_product_attention`, `BertSelfOutput`, `BertAttention`,
`BertIntermediate` / `BertOutput`, `BertLayer`, `BertEncoder`, `BertPooler`, `BertModel`,
`BertForSequenceClassification` returning `loss` / `logits`, a tokenizer with the Hugging Face
call signature padding to `max_length`, `model(**batch)`, accuracy and binary F1.
Synthetic data: Dreaddit-like posts from five subreddit domains (ptsd, anxiety, relationships,
assistance, homeless), 10-28 words, labelled stressed when they carry distress phrases.

Source: conventions.md §2.6, §1 (SDPA row) and §5 item 6.
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SUBREDDITS = ["ptsd", "anxiety", "relationships", "assistance", "homeless"]
STRESS = ["cant sleep", "panic attack", "so overwhelmed", "really scared", "falling apart",
          "no money left", "nightmares again", "cant breathe"]
CALM = ["feeling better", "went for a walk", "grateful for", "had a good talk", "slept well",
        "things are okay", "found a job", "my therapist helped"]
FILLER = ["i", "my", "and", "the", "to", "it", "was", "today", "with", "he", "she", "we", "just",
          "about", "this", "week", "after", "work", "friend", "family", "again"]


@dataclass
class BertConfig:
    vocab_size: int = 128
    hidden_size: int = 48
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 96
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 64
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    num_labels: int = 2


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        position_ids = torch.arange(input_ids.shape[1]).unsqueeze(0)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertSdpaSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout_prob = config.attention_probs_dropout_prob

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        bsz, tgt_len, _ = hidden_states.size()
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        dropout_p = self.dropout_prob if self.training else 0.0
        attn_output = F.scaled_dot_product_attention(query_layer, key_layer, value_layer, attn_mask=attention_mask, dropout_p=dropout_p)  # expect: MC515 keyword
        attn_output = attn_output.transpose(1, 2)
        return attn_output.reshape(bsz, tgt_len, self.all_head_size)


class BertSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = BertSdpaSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states, attention_mask=None):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, hidden_states):
        return F.gelu(self.dense(hidden_states))


class BertOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask=None):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        embedding_output = self.embeddings(input_ids, token_type_ids)
        sequence_output = self.encoder(embedding_output, attention_mask.bool())
        return sequence_output, torch.tanh(self.pooler(sequence_output[:, 0]))


class BertForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_labels = config.num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        _, pooled_output = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits = self.classifier(self.dropout(pooled_output))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


class MentalTokenizer:
    def __init__(self, texts):
        words = sorted({w for t in texts for w in t.split()})
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
        for w in words:
            self.vocab[w] = len(self.vocab)

    def __call__(self, texts, padding="max_length", truncation=True, max_length=32, return_tensors="pt"):
        input_ids, attention_mask = [], []
        for text in texts:
            ids = [2] + [self.vocab.get(w, 1) for w in text.split()]
            ids = ids[: max_length - 1] + [3] if truncation else ids + [3]
            attention_mask.append([1] * len(ids) + [0] * (max_length - len(ids)))
            input_ids.append(ids + [0] * (max_length - len(ids)))
        return {"input_ids": torch.tensor(input_ids), "attention_mask": torch.tensor(attention_mask),
                "token_type_ids": torch.zeros(len(texts), max_length, dtype=torch.long)}


def make_post(rng):
    subreddit = rng.choice(SUBREDDITS)
    label = int(rng.random() < 0.5)
    words = [rng.choice(FILLER) for _ in range(rng.randint(8, 24))]
    phrases = STRESS if label else CALM
    for _ in range(rng.randint(1, 2)):
        words.insert(rng.randrange(len(words) + 1), rng.choice(phrases))
    return f"r/{subreddit} " + " ".join(words), label


class DreadditDataset(torch.utils.data.Dataset):
    def __init__(self, posts, tokenizer, max_length):
        texts = [t for t, _ in posts]
        self.encodings = tokenizer(texts, padding="max_length", truncation=True, max_length=max_length)
        self.labels = torch.tensor([y for _, y in posts])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        item = {k: v[idx] for k, v in self.encodings.items()}
        item["labels"] = self.labels[idx]
        return item


def evaluate(model, dataloader):
    model.eval()
    preds, refs = [], []
    with torch.no_grad():
        for batch in dataloader:
            outputs = model(**batch)
            preds.append(outputs["logits"].argmax(dim=-1))
            refs.append(batch["labels"])
    preds, refs = torch.cat(preds), torch.cat(refs)
    tp = ((preds == 1) & (refs == 1)).sum().item()
    f1 = 2 * tp / max(1, (preds == 1).sum().item() + (refs == 1).sum().item())
    return {"accuracy": (preds == refs).float().mean().item(), "f1": f1}


def main():
    torch.manual_seed(42)
    rng = random.Random(42)
    max_length, per_device_batch_size = 32, 32
    posts = [make_post(rng) for _ in range(1088)]
    tokenizer = MentalTokenizer([t for t, _ in posts])
    train_dataset = DreadditDataset(posts[:1024], tokenizer, max_length)
    eval_dataset = DreadditDataset(posts[1024:], tokenizer, max_length)
    train_dataloader = torch.utils.data.DataLoader(train_dataset, shuffle=True, batch_size=per_device_batch_size)
    eval_dataloader = torch.utils.data.DataLoader(eval_dataset, batch_size=per_device_batch_size)
    config = BertConfig(vocab_size=len(tokenizer.vocab), max_position_embeddings=max_length)
    model = BertForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    num_train_epochs = 4
    max_train_steps = num_train_epochs * math.ceil(len(train_dataloader))
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / max_train_steps)
    for epoch in range(num_train_epochs):
        model.train()
        total_loss = 0.0
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs["loss"]
            total_loss += loss.item()
            loss.backward()
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        eval_metric = evaluate(model, eval_dataloader)
        print(f"epoch {epoch}: loss {total_loss / len(train_dataloader):.4f} {eval_metric}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
