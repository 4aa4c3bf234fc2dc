package pretrain

// The models the tests train compute on the CPU backend (the engine links it for the command).
import _ "rlhfstation/engine/backend/cpu"
