"""Held-out 8: Maia-2 chess move prediction at inference (maia2/inference.py style: a Dataset that
encodes boards and a legal-move mask, a batch loop that turns the policy logits into move
probabilities).

Source: CSSLab/maia2 PR #9 ("Fix masked softmax in inference": illegal moves were masked by
multiplying the logits with the 0/1 legal-move mask before the softmax; a logit of 0 still gets
weight exp(0), so illegal moves keep non-zero and equal probability) and PR #14 (use masked_fill
with -inf instead).
Surroundings: the mask built in a helper and returned through a Dataset's __getitem__ and a
DataLoader, the product bound to a new name, the softmax on the next line.
"""

import chess
import torch
from torch.utils.data import DataLoader, Dataset


def get_all_possible_moves() -> list[str]:
    moves = []
    for sq_from in chess.SQUARES:
        for sq_to in chess.SQUARES:
            if sq_from != sq_to:
                moves.append(chess.Move(sq_from, sq_to).uci())
    return moves


def board_to_tensor(board: chess.Board) -> torch.Tensor:
    tensor = torch.zeros((18, 8, 8))
    for square, piece in board.piece_map().items():
        offset = 0 if piece.color == chess.WHITE else 6
        tensor[piece.piece_type - 1 + offset, square // 8, square % 8] = 1.0
    tensor[12, :, :] = float(board.turn)
    return tensor


def get_legal_moves(board: chess.Board, all_moves_dict: dict[str, int]) -> torch.Tensor:
    legal_moves = torch.zeros(len(all_moves_dict))
    legal_moves_idx = torch.tensor([all_moves_dict[move.uci()] for move in board.legal_moves
                                    if move.uci() in all_moves_dict])
    legal_moves[legal_moves_idx] = 1
    return legal_moves


class TestDataset(Dataset):
    def __init__(self, data, all_moves_dict: dict[str, int], elo_dict: dict):
        self.all_moves_dict = all_moves_dict
        self.data = data
        self.elo_dict = elo_dict

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        fen, move, elo_self, elo_oppo = self.data[idx]
        board = chess.Board(fen)
        board_input = board_to_tensor(board)
        legal_moves = get_legal_moves(board, self.all_moves_dict)
        return fen, board_input, self.elo_dict[elo_self], self.elo_dict[elo_oppo], legal_moves


@torch.no_grad()
def inference_batch(data, model, all_moves_dict, elo_dict, batch_size: int = 256, num_workers: int = 4):
    all_moves_dict_reversed = {v: k for k, v in all_moves_dict.items()}
    dataset = TestDataset(data, all_moves_dict, elo_dict)
    dataloader = DataLoader(dataset, batch_size=batch_size, shuffle=False, drop_last=False, num_workers=num_workers)
    model.eval()
    move_probs, win_probs = [], []
    for fens, boards, elos_self, elos_oppo, legal_moves in dataloader:
        logits_maia, _, logits_value = model(boards, elos_self, elos_oppo)
        logits_maia_legal = logits_maia * legal_moves  # expect: MC520 helper
        probs = logits_maia_legal.softmax(dim=-1).cpu().tolist()  # also: MC520
        win_probs.extend((logits_value / 2 + 0.5).clamp(0, 1).cpu().tolist())
        for i in range(len(fens)):
            legal_move_indices = legal_moves[i].nonzero().flatten().cpu().numpy().tolist()
            legal_moves_mirrored = [all_moves_dict_reversed[idx] for idx in legal_move_indices]
            move_probs.append({m: round(probs[i][idx], 4) for m, idx in zip(legal_moves_mirrored, legal_move_indices)})
    return move_probs, win_probs
