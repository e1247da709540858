// Grammar of .train files: three blocks (model, data, train) of declarations
// and assignments.
//
// Deliberately permissive: block kinds, declaration kinds, field names, op
// names and booleans-as-names are all plain identifiers here, and the AST
// builder / checker decide what they mean. That keeps keywords out of the
// lexer (`train` is both a block and a data{} field) and turns "unknown
// block 'modle'" into a checked error with a did-you-mean instead of a bare
// syntax error.
grammar Train;

file
    : block* EOF
    ;

// `model NAME { ... }`, `data { ... }`, `train { ... }`.
block
    : kind=IDENT name=IDENT? '{' item* '}'
    ;

// Inside `model { }` also: `const a = 1, b = 2`, a nested
// `block name(x, y) { ... return e }`. Which kinds are allowed where is the
// AST builder's and the checker's business, not the grammar's.
item
    : kind=IDENT name=IDENT ':' type                 # Declaration
    | name=IDENT '=' expr                            # Assignment
    | kind=IDENT constDef (',' constDef)*            # Constants
    | kind=IDENT name=IDENT '(' (params+=IDENT (',' params+=IDENT)*)? ')'
      '{' item* '}'                                  # SubBlock
    | RETURN expr                                    # Return
    ;

constDef
    : name=IDENT '=' expr
    ;

// `f32[784]`, `i32[10]`, `f32[3, 32, 32]`, `i32[ctx]`.
type
    : elem=IDENT '[' (expr (',' expr)*)? ']'
    ;

// Precedence climbing: unary minus binds tightest, then * /, then + -.
expr
    : op=('-' | '+') expr                     # Unary
    | expr op=('*' | '/') expr                # Binary
    | expr op=('+' | '-') expr                # Binary
    | INT                                     # Int
    | FLOAT                                   # Float
    | STRING                                  # String
    | BOOL                                    # Bool
    | callee=IDENT '(' (arg (',' arg)*)? ','? ')'  # Call
    | IDENT ('.' IDENT)*                      # Name
    // `(e)` groups; `(a, b)` and `(a,)` are tuples. One alternative keeps
    // the decision LL(1): no scan ahead to the first ',' inside the parens.
    | '(' expr (',' (expr (',' expr)* ','?)?)? ')'   # Group
    ;

// A positional `x` or named `lr = 1e-3` argument.
arg
    : (name=IDENT '=')? expr
    ;

LBRACE : '{' ;
RBRACE : '}' ;
LPAREN : '(' ;
RPAREN : ')' ;
LBRACK : '[' ;
RBRACK : ']' ;
COMMA  : ',' ;
COLON  : ':' ;
DOT    : '.' ;
ASSIGN : '=' ;
PLUS   : '+' ;
MINUS  : '-' ;
STAR   : '*' ;
SLASH  : '/' ;

BOOL : 'true' | 'false' ;

// The one keyword: a statement may not be named `return`.
RETURN : 'return' ;

FLOAT
    : DIGIT+ '.' DIGIT* EXPONENT?
    | '.' DIGIT+ EXPONENT?
    | DIGIT+ EXPONENT
    ;

INT : DIGIT+ ;

IDENT : [a-zA-Z_] [a-zA-Z_0-9]* ;

STRING : '"' (~["\\\r\n] | '\\' ~[\r\n])* '"' ;

// Never reaches the parser: the front end reports it ("unterminated string")
// and retypes it to STRING so parsing recovers gracefully.
UNTERMINATED_STRING : '"' (~["\\\r\n] | '\\' ~[\r\n])* '\\'? ;

COMMENT : '#' ~[\r\n]* -> skip ;
WS : [ \t\r\n\f]+ -> skip ;

// Any other character. The front end reports it and hides the token, so the
// lexer itself never fails and never needs its console error listener.
BAD_CHAR : . ;

fragment DIGIT : [0-9] ;
fragment EXPONENT : [eE] [+-]? DIGIT+ ;
