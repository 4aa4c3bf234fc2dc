package engine

// The backends this build ships: each registers itself with backend.Select.
import _ "rlhfstation/engine/backend/cpu"
