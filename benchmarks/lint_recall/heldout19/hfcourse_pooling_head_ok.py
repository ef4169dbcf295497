"""Hugging Face course, chapter 3 "A full training": a custom attention-pooling head on AutoModel (correct twin).

The course's training loop (DataLoader with `DataCollatorWithPadding`, AdamW, `get_scheduler`,
`model(**batch)` at module level), with the `AutoModelForSequenceClassification` head swapped for
a learner's own: masked mean pooling as in the course's sentence-embeddings section, plus an
`nn.MultiheadAttention` pooling query over the token states. The collator's `attention_mask`
(1 = real token) is handed to `key_padding_mask`, which reads True as padding: the pooling query
attends only to the pad tokens (a review with no padding has every key masked).

Twin: passes `key_padding_mask=attention_mask == 0` (True = padding).

Source: seed self_attention_mask_guide.txt §2 (key_padding_mask: True = padding) and Q1;
conventions.md §1 direction cheat-sheet; pytorch/pytorch PR #141694 (key_padding_mask docs).
"""
import torch
from torch import nn
from torch.optim import AdamW
from torch.utils.data import DataLoader
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (AutoModel, BertConfig, DataCollatorWithPadding,
                          PreTrainedTokenizerFast, get_scheduler)

# The course loads `AutoTokenizer.from_pretrained(checkpoint)`; offline, a word-level tokenizer
# and a small randomly initialised BERT stand in for "bert-base-uncased".
words = "[PAD] [UNK] [CLS] [SEP] the movie was great awful plot acting fine boring loved it not".split()
word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
word_level.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, pad_token="[PAD]", unk_token="[UNK]",
                                    cls_token="[CLS]", sep_token="[SEP]")
config = BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


class PooledClassifier(nn.Module):
    def __init__(self, backbone, num_labels=2, num_heads=4):
        super().__init__()
        self.backbone = backbone
        hidden = backbone.config.hidden_size
        self.query = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.pool = nn.MultiheadAttention(hidden, num_heads, batch_first=True)
        self.classifier = nn.Linear(2 * hidden, num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None):
        outputs = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids)
        token_embeddings = outputs.last_hidden_state
        # mean pooling, as in the course's "semantic search" section
        input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
        mean = torch.sum(token_embeddings * input_mask_expanded, 1) / torch.clamp(
            input_mask_expanded.sum(1), min=1e-9)
        query = self.query.expand(token_embeddings.size(0), -1, -1)
        pooled, _ = self.pool(query, token_embeddings, token_embeddings, key_padding_mask=attention_mask == 0, need_weights=False)
        logits = self.classifier(torch.cat([mean, pooled.squeeze(1)], dim=-1))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits, labels)
        return loss, logits


raw_train = [("the movie was great", 1), ("awful plot", 0), ("loved it", 1),
             ("boring acting not fine", 0), ("the acting was fine and the plot great", 1),
             ("not great", 0), ("the movie was boring", 0), ("great great movie", 1)]
train_features = [dict(tokenizer(text, truncation=True), labels=label) for text, label in raw_train]
data_collator = DataCollatorWithPadding(tokenizer=tokenizer)
train_dataloader = DataLoader(train_features, shuffle=True, batch_size=4, collate_fn=data_collator)

torch.manual_seed(0)
model = PooledClassifier(AutoModel.from_config(config))
optimizer = AdamW(model.parameters(), lr=5e-4)
num_epochs = 3
num_training_steps = num_epochs * len(train_dataloader)
lr_scheduler = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0,
                             num_training_steps=num_training_steps)

model.train()
for epoch in range(num_epochs):
    for batch in train_dataloader:
        loss, _ = model(**batch)
        loss.backward()
        optimizer.step()
        lr_scheduler.step()
        optimizer.zero_grad()
    print(f"epoch {epoch}: loss {loss.item():.4f}")

# a short review padded in a batch should score as it does alone
model.eval()
with torch.no_grad():
    pair = data_collator([dict(tokenizer("loved it")), dict(tokenizer("the acting was fine and the plot great"))])
    alone = data_collator([dict(tokenizer("loved it"))])
    _, padded_logits = model(**pair)
    _, alone_logits = model(**alone)
print("padded vs alone:", (padded_logits[0] - alone_logits[0]).abs().max().item())
print("finite:", bool(torch.isfinite(padded_logits).all()))
