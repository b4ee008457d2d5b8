package demo

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// ModelID is the one model the stand-in model API offers.
const ModelID = "airlock-demo-echo"

// ModelAPI is the stand-in for the model API the demo's shim calls: the
// OpenAI-style GET /v1/models and POST /v1/chat/completions, answering
// with an echo of the last message. Serve it over TLS on
// 127.0.0.1:ModelPort with a certificate for ModelHost; nothing in the
// demo reaches the internet.
func ModelAPI() http.Handler {
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list",
			"data":   []any{map[string]any{"id": ModelID, "object": "model", "owned_by": "airlock-demo"}},
		})
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || len(req.Messages) == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
				"message": "want {\"model\": ..., \"messages\": [{\"role\": ..., \"content\": ...}]}", "type": "invalid_request_error"}})
			return
		}
		last := req.Messages[len(req.Messages)-1].Content
		writeJSON(w, http.StatusOK, map[string]any{
			"id":      fmt.Sprintf("chatcmpl-demo-%d", n.Add(1)),
			"object":  "chat.completion",
			"created": time.Now().Unix(),
			"model":   req.Model,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": "echo: " + last},
				"finish_reason": "stop",
			}},
			"usage": map[string]any{"prompt_tokens": len(last), "completion_tokens": len(last) + 6, "total_tokens": 2*len(last) + 6},
		})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
