package builtin

// The model the tests run computes on the CPU backend (the engine links it for the commands).
import _ "rlhfstation/engine/backend/cpu"
