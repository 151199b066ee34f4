package callout

import (
	_ "embed"
	"encoding/json"
	"strconv"
)

// openai_error_types.json is the one table of OpenAI error types by HTTP status, read here and by
// services/openai_errors.py, so a client sees the same error shape whether the kit's Python services
// or this filter answered.
//
//go:embed openai_error_types.json
var errorTypesJSON []byte

var errorTypes = func() map[int]string {
	var byText map[string]string
	if err := json.Unmarshal(errorTypesJSON, &byText); err != nil {
		panic("openai_error_types.json: " + err.Error())
	}
	types := make(map[int]string, len(byText))
	for status, name := range byText {
		code, err := strconv.Atoi(status)
		if err != nil {
			panic("openai_error_types.json: status " + status + " is not a number")
		}
		types[code] = name
	}
	return types
}()

type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// ErrorBody is an OpenAI-style error: {"error": {"message", "type", "param", "code"}}; code is
// the status or a string such as "callout_unavailable", as services/openai_errors.py allows.
func ErrorBody(status int, message string, code any) []byte {
	t, ok := errorTypes[status]
	if !ok {
		if status >= 500 {
			t = "InternalServerError"
		} else {
			t = "BadRequestError"
		}
	}
	b, _ := json.Marshal(map[string]openAIError{"error": {Message: message, Type: t, Code: code}})
	return b
}
