"""Analytic scoring of English-learner essays, Kaggle Feedback Prize - English Language Learning.

Imitates the widely forked baseline notebook of the competition, "FB3 / Deberta-v3-base
baseline [train]" (Y. Nakama), in its own layout: a `CFG` class, `get_score` with the MCRMSE
over the six analytic measures (cohesion, syntax, vocabulary, phraseology, grammar,
conventions), `prepare_input` calling the tokenizer's `encode_plus` with padding to
`max_len`, `collate` trimming a batch to its longest essay, `TrainDataset`, `CustomModel`
with `feature()` and a pooling head (here the attention pooling many public forks swapped in
for `MeanPooling`), `AverageMeter`, `train_fn` / `valid_fn` under `autocast(enabled=CFG.apex)`.
A word-level tokenizer and a two-layer encoder stand in for DeBERTa-v3; the essays are
synthetic, their scores driven by vocabulary range, sentence length and error tokens.

Source: seed self_attention_mask_guide.txt section 3 (常见误区) and section 7 Q3;
pytorch/pytorch#103963 (conventions.md section 3 item 6).
"""

import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class CFG:
    apex = True
    print_freq = 20
    max_len = 64
    batch_size = 8
    epochs = 3
    encoder_lr = 5e-4
    decoder_lr = 5e-4
    weight_decay = 0.01
    max_grad_norm = 1000
    hidden_size = 64
    num_layers = 2
    num_heads = 4
    target_cols = ["cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"]
    seed = 42
    n_fold = 4
    trn_fold = [0]


def seed_everything(seed=42):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def MCRMSE(y_trues, y_preds):
    scores = []
    idxes = y_trues.shape[1]
    for i in range(idxes):
        y_true = y_trues[:, i]
        y_pred = y_preds[:, i]
        scores.append(np.sqrt(np.mean((y_true - y_pred) ** 2)))
    return np.mean(scores), scores


def get_score(y_trues, y_preds):
    mcrmse_score, scores = MCRMSE(y_trues, y_preds)
    return mcrmse_score, scores


class WordTokenizer:
    def __init__(self, texts, min_freq=1):
        counts = {}
        for text in texts:
            for word in text.lower().split():
                counts[word] = counts.get(word, 0) + 1
        self.vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3}
        for word, count in sorted(counts.items()):
            if count >= min_freq:
                self.vocab[word] = len(self.vocab)

    def encode_plus(self, text, return_tensors=None, add_special_tokens=True, max_length=512,
                    pad_to_max_length=True, truncation=True):
        ids = [self.vocab.get(w, 3) for w in text.lower().split()]
        if add_special_tokens:
            ids = [1] + ids[: max_length - 2] + [2]
        attention_mask = [1] * len(ids)
        if pad_to_max_length:
            attention_mask += [0] * (max_length - len(ids))
            ids += [0] * (max_length - len(ids))
        return {"input_ids": ids, "attention_mask": attention_mask}


def prepare_input(cfg, text):
    inputs = cfg.tokenizer.encode_plus(text, return_tensors=None, add_special_tokens=True,
                                       max_length=cfg.max_len, pad_to_max_length=True, truncation=True)
    for k, v in inputs.items():
        inputs[k] = torch.tensor(v, dtype=torch.long)
    return inputs


def collate(inputs):
    mask_len = int(inputs["attention_mask"].sum(axis=1).max())
    for k, v in inputs.items():
        inputs[k] = inputs[k][:, :mask_len]
    return inputs


class TrainDataset(Dataset):
    def __init__(self, cfg, df):
        self.cfg = cfg
        self.texts = df["full_text"]
        self.labels = df["labels"]

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, item):
        inputs = prepare_input(self.cfg, self.texts[item])
        label = torch.tensor(self.labels[item], dtype=torch.float)
        return inputs, label


class Backbone(nn.Module):
    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, cfg.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg.max_len, cfg.hidden_size)
        layer = nn.TransformerEncoderLayer(cfg.hidden_size, cfg.num_heads, cfg.hidden_size * 4,
                                           dropout=0.1, batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, cfg.num_layers, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        last_hidden_state = self.encoder(hidden, src_key_padding_mask=attention_mask == 0)
        return (last_hidden_state,)


class AttentionPooling(nn.Module):
    def __init__(self, in_dim):
        super().__init__()
        self.attention = nn.Sequential(nn.Linear(in_dim, in_dim), nn.LayerNorm(in_dim), nn.GELU(), nn.Linear(in_dim, 1))

    def forward(self, last_hidden_state, attention_mask):
        w = self.attention(last_hidden_state).float()
        w = w.masked_fill(attention_mask.unsqueeze(-1) == 0, float("-inf"))
        w = torch.softmax(w, 1)
        attention_embeddings = torch.sum(w * last_hidden_state, dim=1)
        return attention_embeddings


class CustomModel(nn.Module):
    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg, vocab_size)
        self.pool = AttentionPooling(cfg.hidden_size)
        self.fc = nn.Linear(cfg.hidden_size, len(cfg.target_cols))
        self._init_weights(self.fc)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if module.bias is not None:
                module.bias.data.zero_()

    def feature(self, inputs):
        outputs = self.model(**inputs)
        last_hidden_states = outputs[0]
        feature = self.pool(last_hidden_states, inputs["attention_mask"])
        return feature

    def forward(self, inputs):
        feature = self.feature(inputs)
        output = self.fc(feature)
        return output


class AverageMeter:
    def __init__(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def train_fn(fold, train_loader, model, criterion, optimizer, epoch, device):
    model.train()
    scaler = torch.amp.GradScaler(enabled=CFG.apex and device.type == "cuda")
    losses = AverageMeter()
    for step, (inputs, labels) in enumerate(train_loader):
        inputs = collate(inputs)
        for k, v in inputs.items():
            inputs[k] = v.to(device)
        labels = labels.to(device)
        batch_size = labels.size(0)
        with torch.autocast(device_type=device.type, enabled=CFG.apex and device.type == "cuda"):
            y_preds = model(inputs)
            loss = criterion(y_preds, labels)
        losses.update(loss.item(), batch_size)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CFG.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    print(f"Epoch: [{epoch + 1}] fold {fold} train loss {losses.avg:.4f}")
    return losses.avg


def valid_fn(valid_loader, model, criterion, device):
    model.eval()
    losses = AverageMeter()
    preds = []
    for inputs, labels in valid_loader:
        inputs = collate(inputs)
        for k, v in inputs.items():
            inputs[k] = v.to(device)
        labels = labels.to(device)
        with torch.no_grad():
            y_preds = model(inputs)
            loss = criterion(y_preds, labels)
        losses.update(loss.item(), labels.size(0))
        preds.append(y_preds.cpu().numpy())
    return losses.avg, np.concatenate(preds)


def make_essays(n, rng):
    common = "i think that the school is good because students can learn many things and".split()
    rich = "furthermore consequently nevertheless remarkable perspective significant elaborate".split()
    errors = "becuz alot dont their there goed".split()
    texts, labels = [], []
    for _ in range(n):
        skill = rng.uniform(0, 1)
        length = int(rng.integers(16, 60))
        words = []
        for _ in range(length):
            r = rng.uniform()
            if r < 0.25 * skill:
                words.append(rng.choice(rich))
            elif r < 0.25 * skill + 0.2 * (1 - skill):
                words.append(rng.choice(errors))
            else:
                words.append(rng.choice(common))
        texts.append(" ".join(words))
        base = 1.5 + 3.0 * skill
        labels.append([float(np.clip(base + rng.normal(0, 0.25), 1.0, 5.0)) for _ in CFG.target_cols])
    return {"full_text": texts, "labels": labels}


def train_loop(train_df, valid_df, fold, device):
    train_loader = DataLoader(TrainDataset(CFG, train_df), batch_size=CFG.batch_size, shuffle=True, drop_last=True)
    valid_loader = DataLoader(TrainDataset(CFG, valid_df), batch_size=CFG.batch_size * 2, shuffle=False)
    model = CustomModel(CFG, len(CFG.tokenizer.vocab)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.encoder_lr, weight_decay=CFG.weight_decay)
    criterion = nn.SmoothL1Loss(reduction="mean")
    best_score = np.inf
    for epoch in range(CFG.epochs):
        train_fn(fold, train_loader, model, criterion, optimizer, epoch, device)
        avg_val_loss, predictions = valid_fn(valid_loader, model, criterion, device)
        score, scores = get_score(np.array(valid_df["labels"]), predictions)
        print(f"Epoch {epoch + 1} - avg_val_loss: {avg_val_loss:.4f}  Score: {score:.4f}  Scores: {np.round(scores, 3)}")
        best_score = min(best_score, score)
    return best_score


if __name__ == "__main__":
    seed_everything(CFG.seed)
    rng = np.random.default_rng(CFG.seed)
    train_df = make_essays(96, rng)
    valid_df = make_essays(32, rng)
    CFG.tokenizer = WordTokenizer(train_df["full_text"])
    device = torch.device("cpu")
    for fold in CFG.trn_fold:
        best = train_loop(train_df, valid_df, fold, device)
        print(f"fold {fold} best MCRMSE {best:.4f}")
