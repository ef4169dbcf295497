"""Tacotron 2 (NVIDIA layout) for a voice assistant's prompt cache.

Fixed prompts ("Your timer is done", ...) are synthesised offline in batches and
cached as mel spectrograms; interactive requests go through single-utterance
inference. Location-sensitive attention, a gated stop token and a postnet.

Source: huggingface/transformers#32195 (conventions.md section 3 item 25); conventions.md
section 1; seed self_attention_mask_guide.txt section 7 Q5.
"""
import sys

import torch
from torch import nn
from torch.nn import functional as F

N_SYMBOLS, N_MEL, GATE_THRESHOLD, MAX_DECODER_STEPS = 40, 20, 0.5, 60


def get_mask_from_lengths(lengths):
    max_len = torch.max(lengths).item()
    ids = torch.arange(0, max_len, device=lengths.device)
    mask = (ids < lengths.unsqueeze(1)).bool()
    return mask


class LocationLayer(nn.Module):
    def __init__(self, attention_n_filters, attention_kernel_size, attention_dim):
        super().__init__()
        padding = int((attention_kernel_size - 1) / 2)
        self.location_conv = nn.Conv1d(2, attention_n_filters, kernel_size=attention_kernel_size, padding=padding, bias=False)
        self.location_dense = nn.Linear(attention_n_filters, attention_dim, bias=False)

    def forward(self, attention_weights_cat):
        return self.location_dense(self.location_conv(attention_weights_cat).transpose(1, 2))


class Attention(nn.Module):
    def __init__(self, attention_rnn_dim, embedding_dim, attention_dim, n_filters=8, kernel_size=7):
        super().__init__()
        self.query_layer = nn.Linear(attention_rnn_dim, attention_dim, bias=False)
        self.memory_layer = nn.Linear(embedding_dim, attention_dim, bias=False)
        self.v = nn.Linear(attention_dim, 1, bias=False)
        self.location_layer = LocationLayer(n_filters, kernel_size, attention_dim)
        self.score_mask_value = -float("inf")

    def forward(self, attention_hidden_state, memory, processed_memory, attention_weights_cat, mask):
        processed_query = self.query_layer(attention_hidden_state.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_weights_cat)
        alignment = self.v(torch.tanh(processed_query + processed_attention_weights + processed_memory)).squeeze(-1)
        if mask is not None:
            alignment = alignment.masked_fill(mask, self.score_mask_value)
        attention_weights = F.softmax(alignment, dim=1)
        attention_context = torch.bmm(attention_weights.unsqueeze(1), memory).squeeze(1)
        return attention_context, attention_weights


class Decoder(nn.Module):
    def __init__(self, enc_dim=32, rnn_dim=64, prenet_dim=32, attention_dim=32):
        super().__init__()
        self.enc_dim, self.rnn_dim = enc_dim, rnn_dim
        self.prenet = nn.ModuleList([nn.Linear(N_MEL, prenet_dim), nn.Linear(prenet_dim, prenet_dim)])
        self.attention_rnn = nn.LSTMCell(prenet_dim + enc_dim, rnn_dim)
        self.attention_layer = Attention(rnn_dim, enc_dim, attention_dim)
        self.decoder_rnn = nn.LSTMCell(rnn_dim + enc_dim, rnn_dim)
        self.linear_projection = nn.Linear(rnn_dim + enc_dim, N_MEL)
        self.gate_layer = nn.Linear(rnn_dim + enc_dim, 1)

    def run_prenet(self, x):
        for linear in self.prenet:
            x = F.dropout(F.relu(linear(x)), p=0.5, training=True)
        return x

    def initialize_decoder_states(self, memory, mask):
        b, t, _ = memory.shape
        zeros = lambda n: memory.new_zeros(b, n)
        self.attention_hidden, self.attention_cell = zeros(self.rnn_dim), zeros(self.rnn_dim)
        self.decoder_hidden, self.decoder_cell = zeros(self.rnn_dim), zeros(self.rnn_dim)
        self.attention_weights, self.attention_weights_cum = zeros(t), zeros(t)
        self.attention_context = zeros(self.enc_dim)
        self.memory, self.mask = memory, mask
        self.processed_memory = self.attention_layer.memory_layer(memory)

    def decode(self, decoder_input):
        cell_input = torch.cat((decoder_input, self.attention_context), -1)
        self.attention_hidden, self.attention_cell = self.attention_rnn(cell_input, (self.attention_hidden, self.attention_cell))
        attention_weights_cat = torch.cat((self.attention_weights.unsqueeze(1), self.attention_weights_cum.unsqueeze(1)), dim=1)
        self.attention_context, self.attention_weights = self.attention_layer(
            self.attention_hidden, self.memory, self.processed_memory, attention_weights_cat, self.mask)
        self.attention_weights_cum = self.attention_weights_cum + self.attention_weights
        decoder_input = torch.cat((self.attention_hidden, self.attention_context), -1)
        self.decoder_hidden, self.decoder_cell = self.decoder_rnn(decoder_input, (self.decoder_hidden, self.decoder_cell))
        hidden_context = torch.cat((self.decoder_hidden, self.attention_context), dim=1)
        return self.linear_projection(hidden_context), self.gate_layer(hidden_context), self.attention_weights

    def forward(self, memory, decoder_inputs, memory_lengths):
        go = memory.new_zeros(memory.size(0), 1, N_MEL)
        decoder_inputs = self.run_prenet(torch.cat((go, decoder_inputs), dim=1))
        self.initialize_decoder_states(memory, mask=~get_mask_from_lengths(memory_lengths))
        mel_outputs, gate_outputs, alignments = [], [], []
        while len(mel_outputs) < decoder_inputs.size(1) - 1:
            mel, gate, align = self.decode(decoder_inputs[:, len(mel_outputs)])
            mel_outputs.append(mel)
            gate_outputs.append(gate.squeeze(1))
            alignments.append(align)
        return torch.stack(mel_outputs, 1), torch.stack(gate_outputs, 1), torch.stack(alignments, 1)

    def inference(self, memory, mask=None):
        decoder_input = memory.new_zeros(memory.size(0), N_MEL)
        self.initialize_decoder_states(memory, mask=mask)
        mel_outputs, gate_outputs, alignments = [], [], []
        while len(mel_outputs) < MAX_DECODER_STEPS:
            mel, gate, align = self.decode(self.run_prenet(decoder_input))
            mel_outputs.append(mel)
            gate_outputs.append(gate.squeeze(1))
            alignments.append(align)
            if torch.all(torch.sigmoid(gate) > GATE_THRESHOLD):
                break
            decoder_input = mel
        return torch.stack(mel_outputs, 1), torch.stack(gate_outputs, 1), torch.stack(alignments, 1)


class Tacotron2(nn.Module):
    def __init__(self, enc_dim=32):
        super().__init__()
        self.embedding = nn.Embedding(N_SYMBOLS, enc_dim)
        self.convolutions = nn.Sequential(nn.Conv1d(enc_dim, enc_dim, 5, padding=2), nn.BatchNorm1d(enc_dim), nn.ReLU())
        self.lstm = nn.LSTM(enc_dim, enc_dim // 2, 1, batch_first=True, bidirectional=True)
        self.decoder = Decoder(enc_dim=enc_dim)
        self.postnet = nn.Sequential(nn.Conv1d(N_MEL, 32, 5, padding=2), nn.Tanh(), nn.Conv1d(32, N_MEL, 5, padding=2))

    def encode(self, text, text_lengths):
        x = self.convolutions(self.embedding(text).transpose(1, 2)).transpose(1, 2)
        x = nn.utils.rnn.pack_padded_sequence(x, text_lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, _ = self.lstm(x)
        return nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True, total_length=text.size(1))[0]

    def parse_output(self, mel_outputs, mel_postnet, gate_outputs, output_lengths):
        mask = ~get_mask_from_lengths(output_lengths)
        mel_outputs = mel_outputs.masked_fill(mask.unsqueeze(-1), 0.0)
        mel_postnet = mel_postnet.masked_fill(mask.unsqueeze(-1), 0.0)
        gate_outputs = gate_outputs.masked_fill(mask, 1e3)
        return mel_outputs, mel_postnet, gate_outputs

    def forward(self, text, text_lengths, mels, output_lengths):
        memory = self.encode(text, text_lengths)
        mel_outputs, gate_outputs, alignments = self.decoder(memory, mels, text_lengths)
        mel_postnet = mel_outputs + self.postnet(mel_outputs.transpose(1, 2)).transpose(1, 2)
        return self.parse_output(mel_outputs, mel_postnet, gate_outputs, output_lengths) + (alignments,)

    @torch.no_grad()
    def inference(self, text):
        memory = self.encode(text, torch.tensor([text.size(1)]))
        mel_outputs, gate_outputs, alignments = self.decoder.inference(memory)
        return mel_outputs + self.postnet(mel_outputs.transpose(1, 2)).transpose(1, 2), alignments

    @torch.no_grad()
    def inference_batch(self, text, text_lengths):
        memory = self.encode(text, text_lengths)
        mask = ~get_mask_from_lengths(text_lengths)
        mel_outputs, gate_outputs, alignments = self.decoder.inference(memory, mask=mask)
        stops = (torch.sigmoid(gate_outputs) > GATE_THRESHOLD).float().argmax(1) + 1
        return mel_outputs + self.postnet(mel_outputs.transpose(1, 2)).transpose(1, 2), stops, alignments


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Tacotron2()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    text_lengths, output_lengths = torch.tensor([11, 8, 6]), torch.tensor([18, 14, 10])
    text = torch.randint(1, N_SYMBOLS, (3, 11)).masked_fill(~get_mask_from_lengths(text_lengths), 0)
    mels = torch.randn(3, 18, N_MEL).masked_fill(~get_mask_from_lengths(output_lengths)[..., None], 0.0)
    gate_target = (torch.arange(18)[None] >= output_lengths[:, None] - 1).float()
    for step in range(2):
        mel_out, mel_post, gate_out, align = model(text, text_lengths, mels, output_lengths)
        loss = F.mse_loss(mel_out, mels) + F.mse_loss(mel_post, mels) + F.binary_cross_entropy_with_logits(gate_out, gate_target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f} max align {align.max().item():.3f}")
    model.eval()
    mel, align = model.inference(text[:1, :11])
    print("prompt mel", tuple(mel.shape), "attention on last symbol", round(align[0, -1, -1].item(), 3))
    if "--batch" in sys.argv:
        mels_out, stops, _ = model.inference_batch(text, text_lengths)
        print("cached prompts", tuple(mels_out.shape), "stop frames", stops.tolist())
